"""The `gpuwatch` command: argument parsing, progress bars and exit codes; the only module that prints."""

import argparse
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeVar

from gpuwatch import __version__
from gpuwatch.core.config import Settings, load_settings
from gpuwatch.core.errors import ConfigError, GpuwatchError, SourceError

if TYPE_CHECKING:
    from gpuwatch.read.service import FleetService
    from gpuwatch.sim.systems import SimulationParams
    from gpuwatch.surfaces.exports import WindowRequest

# 1: `gpuwatch check` found a problem (one line each on stderr); 2: usage or config; 3: a source unreachable.
EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_SOURCE = 0, 1, 2, 3
T = TypeVar("T")


# The cycle collector's generation-0 threshold (Python's default is 700 allocations): a month's answers
# from Prometheus are millions of small acyclic objects, which the default makes it walk again and again
# (about a quarter of a 30-day report's CPU time at 10,000 GPUs). Cycles are still collected.
GC_THRESHOLD: Final = (50_000, 20, 20)


def main(argv: Sequence[str] | None = None) -> int:
    gc.set_threshold(*GC_THRESHOLD)
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except SourceError as e:
        _fail(str(e))
        return EXIT_SOURCE
    except GpuwatchError as e:  # bad config, flags or input files: the user can fix them
        _fail(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> None:
    print(f"gpuwatch: error: {message}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="YAML config file (also GPUWATCH_CONFIG)")
    common.add_argument("--prometheus-url", help="Prometheus base URL (also GPUWATCH_PROMETHEUS_URL)")
    common.add_argument("--prometheus-bearer-token-file", help="file holding a bearer token for Prometheus")
    common.add_argument("--prometheus-ca-file", help="CA bundle to verify Prometheus' TLS certificate")
    common.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    common.add_argument("--context", help="kubeconfig context")

    parser = argparse.ArgumentParser(prog="gpuwatch", description="GPU fleet monitoring and cost analytics.")
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", parents=[common], help="run the Dash web UI")
    _add_demo(serve, "serve the simulated fleet")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8050)
    serve.add_argument(
        "--auth-file",
        metavar="PATH",
        help="require HTTP basic auth on every route; PATH holds `user:password` lines",
    )
    serve.set_defaults(handler=_cmd_serve)

    report = sub.add_parser("report", parents=[common], help="the GPU-hour ledger report for a window")
    _add_demo(report, "report on the simulated fleet")
    report.add_argument("--start", type=_iso_time, help="window start, ISO 8601 (default: end - 1 day)")
    report.add_argument(
        "--end", "--until", dest="end", type=_iso_time, help="window end, ISO 8601 (default: now)"
    )
    report.add_argument(
        "--since",
        type=_duration_seconds,
        metavar="DURATION",
        help="window length back from the end, e.g. 7d, 30d, 12h (instead of --start)",
    )
    report.add_argument("--step", type=_step_seconds, default=60, help="sample step (default 60s)")
    report.add_argument(
        "--group-by", choices=("team", "namespace", "workload", "pool", "cluster"), default="team"
    )
    report.add_argument(
        "--format",
        choices=("table", "json", "csv", "parquet", "html", "focus"),
        default="table",
        help="focus: FOCUS 1.2 cost and usage rows (CSV; Parquet when --output ends in .parquet)",
    )
    report.add_argument(
        "--focus-period",
        choices=("hour", "day"),
        default="day",
        help="--format focus: the charge period of a row (default day)",
    )
    report.add_argument("--output", "-o", help="write to this file instead of standard output")
    report.add_argument(
        "--source",
        choices=("auto", "history", "raw"),
        default="auto",
        help="history: gpuwatch's own gpuwatch_* series; raw: recompute from DCGM series and the API "
        "server; auto (default): history when the window holds more GPU-samples (GPUs × samples) than "
        "views.raw_max_gpu_samples (1,000,000) and those series exist",
    )
    report.set_defaults(handler=_cmd_report)

    export = sub.add_parser("export", parents=[common], help="publish gpuwatch_* series for Prometheus")
    _add_demo(export, "export the simulated fleet", clusters=1)
    export.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a pod)")
    export.add_argument("--port", type=int, default=9402)
    export.add_argument("--interval", type=_step_seconds, default=30, help="collection cycle (default 30s)")
    export.set_defaults(handler=_cmd_export)

    check = sub.add_parser(
        "check",
        parents=[common],
        help="connectivity, RBAC, DCGM metrics, coverage",
        description="What gpuwatch can see, one line each: `ok:` findings and `warning:` lines on standard "
        "output, problems on standard error.",
        epilog="exit codes: 0 no problem (warnings such as low coverage or a Prometheus with too little "
        "history yet do not fail), 1 a problem was found, 2 usage or configuration error (a missing "
        "kubeconfig too: the other sources are still checked), 3 Prometheus or the Kubernetes API is "
        "unreachable",
    )
    check.add_argument(
        "--timeout",
        type=_duration_seconds,
        default=10.0,
        metavar="DURATION",
        help="how long each source may take to answer (default 10s); the sources are asked side by side",
    )
    check.set_defaults(handler=_cmd_check)

    sim = sub.add_parser("simulate", help="the simulated fleet as outside systems see it")
    sim_sub = sim.add_subparsers(dest="what", required=True, metavar="WHAT")
    fleet_args = argparse.ArgumentParser(add_help=False)
    fleet_args.add_argument("--seed", type=int, default=42)
    fleet_args.add_argument("--end", type=_iso_time, help="window end, ISO 8601 (default: the current hour)")
    fleet_args.add_argument("--days", type=float, default=1.0, help="window length in days (default 1)")
    fleet_args.add_argument("--step", type=_step_seconds, default=60, help="sample step, e.g. 60s (default)")
    fleet_args.add_argument("--gpus", type=int, help="scale the fleet to about this many GPUs (default 80)")
    fleet_args.add_argument(
        "--pods", type=int, help="about this many pods over the window: they live longer (default: demo's)"
    )

    backfill = sim_sub.add_parser(
        "backfill",
        parents=[fleet_args],
        help="write the fleet's history: an OpenMetrics file for promtool, or TSDB blocks for Prometheus",
    )
    into = backfill.add_mutually_exclusive_group(required=True)
    into.add_argument(
        "--output",
        "-o",
        help="OpenMetrics file to write (for promtool tsdb create-blocks-from); a world too large to write "
        "within 2 GB of memory is refused: use --tsdb",
    )
    into.add_argument(
        "--tsdb",
        metavar="DIR",
        help="write 2 h TSDB blocks into DIR (a Prometheus --storage.tsdb.path); DCGM series need promtool",
    )
    backfill.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="with --tsdb: processes side by side"
    )
    backfill.add_argument(
        "--layout",
        choices=("servicemonitor", "honor_labels"),
        default="servicemonitor",
        help="labels as Prometheus stores them (servicemonitor: exported_* under honorLabels=false)",
    )
    backfill.add_argument("--metrics", nargs="*", help="only these DCGM metric families")
    backfill.add_argument("--no-dcgm", action="store_true", help="leave out the DCGM series (raw telemetry)")
    backfill.add_argument(
        "--no-gpuwatch-series",
        action="store_true",
        help="leave out gpuwatch's own history (gpuwatch_* series)",
    )
    backfill.add_argument(
        "--cluster",
        metavar="NAME",
        help='label every series cluster="NAME", as one of several clusters sharing a Prometheus',
    )
    backfill.set_defaults(handler=_cmd_backfill)

    metrics = sim_sub.add_parser("metrics", parents=[fleet_args], help="serve dcgm-exporter /metrics")
    metrics.add_argument("--host", default="127.0.0.1")
    metrics.add_argument("--port", type=int, default=9400)
    metrics.set_defaults(handler=_cmd_metrics)

    kube = sim_sub.add_parser(
        "kube-api",
        parents=[fleet_args],
        help="serve the Kubernetes API (HTTPS) for kubectl and gpuwatch",
        description="The simulated cluster's Kubernetes API over HTTPS, with a certificate from a CA made "
        "at start: --write-kubeconfig writes the CA and the token, so kubectl and gpuwatch verify it.",
    )
    kube.add_argument("--host", default="127.0.0.1")
    kube.add_argument("--port", type=int, default=6443)
    auth = kube.add_mutually_exclusive_group()
    auth.add_argument("--token", default="gpuwatch-sim-token", help="bearer token clients must send")
    auth.add_argument(
        "--no-auth",
        action="store_true",
        help="plain http without a token, as `kubectl proxy` serves (over https, kubectl prompts for a "
        "user name when the kubeconfig holds no credentials)",
    )
    kube.add_argument(
        "--write-kubeconfig", metavar="PATH", help="write a kubeconfig (server, CA, token) for the server"
    )
    kube.add_argument(
        "--cpu-pods",
        type=int,
        default=0,
        metavar="N",
        help="also list N running pods without GPUs (node agents, services), as a large cluster does",
    )
    kube.set_defaults(handler=_cmd_kube_api)

    replay = sim_sub.add_parser("replay", help="replay an Alibaba openb node/pod trace (Weng et al., ATC'23)")
    replay.add_argument("--nodes", required=True, help="openb_node_list_gpu_node.csv")
    replay.add_argument("--pods", required=True, help="openb_pod_list_default.csv")
    replay.add_argument("--start", type=_iso_time, default=datetime(2026, 1, 1, tzinfo=UTC))
    replay.add_argument("--days", type=float, default=7.0)
    replay.add_argument("--step", type=_step_seconds, default=300)
    replay.add_argument("--seed", type=int, default=0)
    replay.add_argument(
        "--offset-days", type=float, help="trace day the window starts at (default: the trace's last --days)"
    )
    replay.add_argument(
        "--lifetime-scale", type=float, default=1.0, help="stretch every pod's lifetime to load the cluster"
    )
    replay.set_defaults(handler=_cmd_replay)
    return parser


def _iso_time(text: str) -> datetime:
    from gpuwatch.surfaces.exports import parse_instant

    return _argument(parse_instant, text)


def _duration_seconds(text: str) -> float:
    from gpuwatch.surfaces.exports import parse_length

    return _argument(parse_length, text)


def _step_seconds(text: str) -> int:
    from gpuwatch.surfaces.exports import parse_step

    return _argument(parse_step, text)


def _argument(parse: "Callable[[str], T]", text: str) -> "T":
    """parse(text), its one-line error argparse's."""
    try:
        return parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _settings(args: argparse.Namespace) -> Settings:
    flags = {
        "prometheus_url": args.prometheus_url,
        "prometheus_bearer_token_file": args.prometheus_bearer_token_file,
        "prometheus_ca_file": args.prometheus_ca_file,
        "kubeconfig": args.kubeconfig,
        "context": args.context,
    }
    return load_settings(config_path=args.config, flags=flags)


def _sim_params(args: argparse.Namespace) -> "SimulationParams":
    from gpuwatch.sim.systems import SimulationParams

    return SimulationParams(
        seed=args.seed, end=args.end, days=args.days, step_seconds=args.step, gpus=args.gpus, pods=args.pods
    )


def _add_demo(parser: argparse.ArgumentParser, what: str, *, clusters: int | None = None) -> None:
    """--demo, and --demo-clusters (default: `clusters`, else the demo's two)."""
    default = f"{clusters}, the cluster an exporter runs in" if clusters else "2: eu-1, us-1"
    parser.add_argument("--demo", action="store_true", help=what)
    parser.add_argument(
        "--demo-clusters",
        type=int,
        default=clusters,
        metavar="N",
        help=f"with --demo: simulate N clusters, 1 to 4 (default {default}); a config's `clusters:` list "
        "names them instead",
    )


def _service(
    args: argparse.Namespace,
    *,
    history_days: float | None = None,
    settings: Settings | None = None,
    long_running: bool = False,
    field_seconds: float | None = None,
) -> "FleetService":
    """The live service (the cluster followed by watches when `long_running`), or with --demo the
    simulated fleet (its history at least `history_days` long)."""
    from gpuwatch.wiring import fleet_service

    return fleet_service(
        settings or _settings(args),
        demo=getattr(args, "demo", False),
        demo_clusters=getattr(args, "demo_clusters", None),
        history_days=history_days or 0.0,
        watch_cluster=long_running,
        field_seconds=field_seconds,
    )


def _window_request(args: argparse.Namespace) -> "WindowRequest":
    from gpuwatch.surfaces.exports import WindowRequest

    return WindowRequest(
        start=args.start, end=args.end, since_seconds=args.since, step_seconds=args.step, source=args.source
    )


GUNICORN_HINT = "for production, run it under gunicorn: gunicorn -c gunicorn.conf.py app:server"


def _cmd_serve(args: argparse.Namespace) -> int:
    from gpuwatch.ui import Listener, create_app
    from gpuwatch.ui.app import load_users

    settings = _settings(args)  # a bad config is reported before anything else
    service = _service(args, settings=settings, long_running=True)
    service.sources.load()  # a missing kubeconfig or token file: exit 2 before listening
    if args.auth_file:
        load_users(args.auth_file)
    try:  # bound before the fleet is read: a port in use fails at once, the address is announced once served
        listener = Listener(args.host, args.port)
    except OSError as e:
        raise ConfigError(f"cannot serve on {args.host}:{args.port}: {e.strerror or e}") from e
    app = create_app(service, auth_file=args.auth_file)
    print(
        f"gpuwatch: dashboard on {listener.url} · {_reading(args, service)} ({GUNICORN_HINT})",
        file=sys.stderr,
        flush=True,
    )
    listener.serve(app)
    return EXIT_OK


def _reading(args: argparse.Namespace, service: "FleetService") -> str:
    """What a long-running command reads: "reading Prometheus at … and the Kubernetes API at …"."""
    if getattr(args, "demo", False):
        return "the simulated fleet"
    from gpuwatch.read.service import LiveSources, MultiClusterSources

    sources = service.sources
    members = sources.members if isinstance(sources, MultiClusterSources) else {"": sources}
    parts = []
    for name, member in members.items():
        if isinstance(member, LiveSources):
            where = f"{name}: " if name else ""
            prometheus, kubernetes = member.prometheus.url, member.kubernetes.server
            parts.append(f"{where}Prometheus at {prometheus} and the Kubernetes API at {kubernetes}")
    return "reading " + "; ".join(parts)


def _cmd_report(args: argparse.Namespace) -> int:
    from gpuwatch.surfaces.exports import focus_bytes, window_report
    from gpuwatch.surfaces.renderings import SOURCE_RAW, render

    request = _window_request(args)
    if args.demo:
        from gpuwatch.sim.demo import demo_end

        # The simulated history starts early enough for the window: no day before it is invented.
        window = request.window(demo_end())
        service = _service(args, history_days=(demo_end() - window.start).total_seconds() / 86_400 + 1)
    else:
        service = _service(args)
        window = request.window(service.now())
    if args.format == "focus":
        parquet = bool(args.output) and str(args.output).endswith(".parquet")
        data = focus_bytes(
            service, window, source=args.source, period=args.focus_period, parquet=parquet, warn=_say
        )
        return _write(args, data)
    report, source = window_report(
        service, window, source=args.source, detail_for=(args.format, args.group_by), warn=_say
    )
    if source == SOURCE_RAW and window.step_seconds != args.step:
        _say(f"step raised to {window.step_seconds}s (11,000 points per series)")
    return _write(args, render(report, args.format, group_by=args.group_by, source=source))


def _say(message: str) -> None:
    print(f"gpuwatch: {message}", file=sys.stderr)


def _write(args: argparse.Namespace, data: bytes) -> int:
    """The report's bytes to --output, or to standard output (never Parquet's)."""
    if args.output:
        try:
            with open(args.output, "wb") as out:
                out.write(data)
        except OSError as e:
            raise ConfigError(f"cannot write {args.output}: {e.strerror}") from e
    elif args.format == "parquet":
        raise ConfigError("--format parquet needs --output PATH")
    else:
        sys.stdout.write(data.decode())
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from gpuwatch.surfaces.exporter import PUBLISHED_FIELD_SECONDS, serve_exporter

    service = _service(args, long_running=True, field_seconds=PUBLISHED_FIELD_SECONDS)
    service.sources.load()  # a missing kubeconfig or token file: exit 2 before listening
    try:
        server, loop, _registry = serve_exporter(
            service, host=args.host, port=args.port, interval_seconds=args.interval
        )
    except OSError as e:
        raise ConfigError(f"cannot serve on {args.host}:{args.port}: {e.strerror or e}") from e
    print(
        f"gpuwatch: exporting on http://{args.host}:{args.port}/metrics every {args.interval:g}s · "
        f"{_reading(args, service)}",
        file=sys.stderr,
        flush=True,
    )
    _wait_for_signal()
    loop.stop()
    server.shutdown()
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from gpuwatch.surfaces.check import check

    result = check(_settings(args), timeout_seconds=args.timeout)
    for line in result.findings:
        print(f"ok: {line}")
    for line in result.warnings:
        print(f"warning: {line}")
    for problem in result.problems:
        print(f"gpuwatch: problem: {problem}", file=sys.stderr)
    if result.misconfigured:
        return EXIT_USAGE
    if result.unreachable:
        return EXIT_SOURCE
    return EXIT_PROBLEM if result.problems else EXIT_OK


def _cmd_backfill(args: argparse.Namespace) -> int:
    from gpuwatch.sim.backfill import cluster_labels, write_simulated_backfill, write_tsdb

    if args.no_dcgm and args.no_gpuwatch_series:
        raise ConfigError("--no-dcgm with --no-gpuwatch-series leaves nothing to write")
    cluster_labels(args.cluster)  # a bad name fails before the fleet is built
    progress = ProgressBar("backfill", sys.stderr)
    what: dict[str, Any] = {
        "layout": args.layout,
        "metrics": args.metrics,
        "dcgm": not args.no_dcgm,
        "gpuwatch_series": not args.no_gpuwatch_series,
        "cluster": args.cluster,
    }
    try:
        if args.tsdb:
            fleet = _sim_params(args).build()
            done = write_tsdb(fleet, args.tsdb, workers=args.workers, progress=progress.update, **what)
            where, n = f"{done.blocks} blocks of {args.tsdb}", done.samples
        else:
            n = write_simulated_backfill(args.output, _sim_params(args), progress=progress.update, **what)
            where = args.output
    except OSError as e:
        raise ConfigError(f"cannot write {args.output or args.tsdb}: {e.strerror}") from e
    finally:
        progress.finish()
    print(f"gpuwatch: wrote {n} samples to {where}", file=sys.stderr)
    return EXIT_OK


def _cmd_metrics(args: argparse.Namespace) -> int:
    from gpuwatch.sim.systems import serve_simulated_metrics

    server = serve_simulated_metrics(_sim_params(args), host=args.host, port=args.port)
    print(f"gpuwatch: dcgm-exporter metrics on {server.url}/metrics", file=sys.stderr)
    _wait_for_signal()
    server.close()
    return EXIT_OK


def _cmd_kube_api(args: argparse.Namespace) -> int:
    from gpuwatch.sim.systems import serve_simulated_kube_api

    server = serve_simulated_kube_api(
        _sim_params(args),
        host=args.host,
        port=args.port,
        token=None if args.no_auth else args.token,
        kubeconfig_path=args.write_kubeconfig,
        tls=not args.no_auth,
        cpu_pods=args.cpu_pods,
    )
    print(f"gpuwatch: Kubernetes API on {server.url}", file=sys.stderr)
    if args.write_kubeconfig:
        print(f"gpuwatch: kubeconfig written to {args.write_kubeconfig}", file=sys.stderr)
    _wait_for_signal()
    server.close()
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    from gpuwatch.sim.systems import replay_openb_trace

    result = replay_openb_trace(
        args.nodes,
        args.pods,
        start=args.start,
        days=args.days,
        step_seconds=args.step,
        seed=args.seed,
        offset_days=args.offset_days,
        lifetime_scale=args.lifetime_scale,
    )
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value:,.2f}" if isinstance(value, float) else f"{key:<{width}}  {value:,}")
    return EXIT_OK


def _wait_for_signal() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()


class ProgressBar:
    """A one-line progress bar on a terminal; silent when stderr is not a TTY (CI, pipes)."""

    def __init__(self, label: str, stream: TextIO, width: int = 30) -> None:
        self.label, self.stream, self.width = label, stream, width
        self.enabled = stream.isatty()
        self._last = -1

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        pct = min(100, done * 100 // total)
        if pct == self._last:
            return
        self._last = pct
        filled = self.width * pct // 100
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {pct:3d}%")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self._last >= 0:
            self.stream.write("\n")
            self.stream.flush()
