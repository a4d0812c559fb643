"""Settings: YAML < GPUWATCH_* env < flags; one-line errors naming the key."""

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from gpuwatch.core.config import load_settings
from gpuwatch.core.errors import ConfigError

FULL = """
prometheus: {url: http://prometheus:9090, bearer_token_file: /var/run/token, timeout: 30s}
kubernetes: {kubeconfig: ~/.kube/config, context: prod}
teams:
  pod_label_keys: [team, owner]
  namespace_label_keys: [team]
  namespaces: {notebooks: data-science}
pricing:
  default_usd_per_gpu_hour: 2.5
  products: {NVIDIA-H100-80GB-HBM3: 4.0, NVIDIA-L4: 0.8}
idle: {threshold: 0.1, window: 1h, reclaim_after: 90m}
"""


NOW = datetime(2026, 11, 20, tzinfo=UTC)


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpuwatch.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_without_any_layer() -> None:
    s = load_settings(env={})
    assert s.prometheus.url is None and s.prometheus.timeout_seconds == 60.0
    assert s.kubernetes.kubeconfig is None
    assert s.teams.pod_label_keys == ("team",)
    assert s.pricing.default_usd_per_gpu_hour == 2.0
    assert s.idle.threshold_ratio == 0.05 and s.idle.window_seconds == 1800
    assert s.idle.reclaim_after_seconds == 7200


def test_full_file(tmp_path: Path) -> None:
    s = load_settings(config_path=_write(tmp_path, FULL), env={})
    assert s.prometheus.url == "http://prometheus:9090"
    assert s.prometheus.timeout_seconds == 30.0
    assert s.kubernetes.context == "prod"
    assert s.teams.pod_label_keys == ("team", "owner")
    assert s.teams.namespaces == {"notebooks": "data-science"}
    assert s.pricing.usd_per_gpu_hour("NVIDIA H100 80GB HBM3", NOW) == 4.0
    assert s.pricing.default_usd_per_gpu_hour == 2.5
    assert s.idle.threshold_ratio == 0.1 and s.idle.window_seconds == 3600
    assert s.idle.reclaim_after_seconds == 5400


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    path = _write(tmp_path, FULL)
    env = {"GPUWATCH_PROMETHEUS_URL": "http://from-env:9090", "GPUWATCH_CONTEXT": "staging"}
    s = load_settings(config_path=path, env=env)
    assert s.prometheus.url == "http://from-env:9090"
    assert s.kubernetes.context == "staging"
    s = load_settings(
        config_path=path, env=env, flags={"prometheus_url": "http://from-flag:9090", "context": None}
    )
    assert s.prometheus.url == "http://from-flag:9090"
    assert s.kubernetes.context == "staging"


def test_config_path_from_env(tmp_path: Path) -> None:
    s = load_settings(env={"GPUWATCH_CONFIG": _write(tmp_path, "idle: {window: 45m}")})
    assert s.idle.window_seconds == 2700


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("promethues: {url: x}", "config: unknown key 'promethues'"),
        ("prometheus: {uri: x}", "config: unknown key prometheus.uri"),
        ("idle: {window: soon}", "config: idle.window: bad duration 'soon'"),
        ("idle: {window: 0s}", "config: idle.window must be a positive duration"),
        ("idle: {threshold: 5}", "config: idle.threshold must be a ratio in [0, 1], got 5"),
        (
            "pricing: {default_usd_per_gpu_hour: -1}",
            "config: pricing.default_usd_per_gpu_hour must not be negative",
        ),
        ("pricing: {products: {NVIDIA-L4: -0.8}}", "config: pricing.products.NVIDIA-L4 must not be negative"),
        ("pricing: {products: {NVIDIA-L4: cheap}}", "config: pricing.products.NVIDIA-L4 must be a number"),
        ("teams: {pod_label_keys: team}", "config: teams.pod_label_keys must be a list of strings"),
        (
            "pricing: {products: {X: [{from: 2026-01-01T00:00:00Z, usd_per_gpu_hour: 1},"
            " {from: 2026-01-01T00:00:00Z, usd_per_gpu_hour: 2}]}}",
            "config: pricing.products.X has two prices from 2026-01-01T00:00:00+00:00 (dated prices overlap)",
        ),
        (
            "pricing: {products: {X: [{from: 2026-01-01T00:00:00, usd_per_gpu_hour: 1}]}}",
            "config: pricing.products.X[0].from must carry a timezone",
        ),
        (
            "pricing: {products: {X: [{from: soon, usd_per_gpu_hour: 1}]}}",
            "config: pricing.products.X[0].from must be an ISO 8601 time, got 'soon'",
        ),
        (
            "pricing: {products: {X: [{from: 2026-01-01, usd_per_gpu_hour: -1}]}}",
            "config: pricing.products.X[0].usd_per_gpu_hour must not be negative",
        ),
        (
            "pricing: {products: {X: [{from: 2026-01-01, price: 1}]}}",
            "config: unknown key pricing.products.X[0].price",
        ),
        ("pricing: {products: {X: []}}", "config: pricing.products.X must list at least one"),
        (
            "pricing: {amortization: {X: {purchase_usd: 100, months: 0}}}",
            "config: pricing.amortization.X.months must be a whole number of months ≥ 1, got 0",
        ),
        (
            "pricing: {amortization: {X: {purchase_usd: 100, months: 12, residual_usd: 200}}}",
            "config: pricing.amortization.X.residual_usd (200) exceeds purchase_usd (100)",
        ),
        ("pricing: {amortization: {X: {purchase_usd: 100}}}", "config: pricing.amortization.X lacks months"),
        (
            "pricing: {products: {NVIDIA L4: 1}, amortization: {NVIDIA-L4: {purchase_usd: 100, months: 2}}}",
            "config: pricing: NVIDIA-L4 is both priced (products) and amortized (amortization)",
        ),
        (
            "budgets: {monthly_usd: {research: -5}}",
            "config: budgets.monthly_usd.research must not be negative",
        ),
        ("budgets: {monthly_usd: {research: lots}}", "config: budgets.monthly_usd.research must be a number"),
        ("budgets: {monthly_usd: [research]}", "config: budgets.monthly_usd must be a mapping"),
        ("budgets: {yearly_usd: {research: 1}}", "config: unknown key budgets.yearly_usd"),
        ("pricing: {energy: {usd_per_kwh: 0.1, pue: 0.9}}", "config: pricing.energy.pue is facility power"),
        ("pricing: {energy: {usd_per_kwh: -0.1}}", "config: pricing.energy.usd_per_kwh must not be negative"),
        ("pricing: {energy: {pue: 1.2}}", "config: pricing.energy lacks usd_per_kwh"),
        (
            "pricing: {energy: {usd_per_kwh: [{from: 2026-01-01T00:00:00Z, usd_per_gpu_hour: 1}]}}",
            "config: unknown key pricing.energy.usd_per_kwh[0].usd_per_gpu_hour",
        ),
        (
            "pricing: {commitments: {X: [{from: 2026-02-01, until: 2026-01-01, "
            "gpus: 8, usd_per_gpu_hour: 2}]}}",
            "config: pricing.commitments.X[0].until (2026-01-01T00:00:00+00:00) must come after its from",
        ),
        (
            "pricing: {commitments: {X: [{from: 2026-01-01, until: 2027-01-01, "
            "gpus: 0, usd_per_gpu_hour: 2}]}}",
            "config: pricing.commitments.X[0].gpus must be a number of GPUs above 0, got 0",
        ),
        (
            "pricing: {commitments: {X: [{from: 2026-01-01, until: 2027-01-01, "
            "gpus: 8, usd_per_gpu_hour: -2}]}}",
            "config: pricing.commitments.X[0].usd_per_gpu_hour must not be negative",
        ),
        (
            "pricing: {commitments: {X: [{from: 2026-01-01, gpus: 8, usd_per_gpu_hour: 2}]}}",
            "config: pricing.commitments.X[0] lacks until",
        ),
        ("pricing: {commitments: {X: {gpus: 8}}}", "config: pricing.commitments.X must list at least one"),
        ("prometheus: [1, 2]", "config: prometheus must be a mapping"),
        ("- just\n- a list", "top level must be a mapping"),
        ("prometheus: {url: [unclosed", "is not valid YAML at line 1"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(config_path=_write(tmp_path, text), env={})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config file .*nope.yaml: No such file"):
        load_settings(config_path=str(tmp_path / "nope.yaml"), env={})


def test_dated_prices_and_amortization_from_the_issue_example(tmp_path: Path) -> None:
    text = """
pricing:
  products:
    NVIDIA-A100-SXM4-80GB:
      - {from: 2026-11-15T00:00:00Z, usd_per_gpu_hour: 2.0}
      - {from: 2026-01-01T00:00:00Z, usd_per_gpu_hour: 2.5}
    NVIDIA-H100-80GB-HBM3: 4.0
  amortization: {NVIDIA-L4: {purchase_usd: 9000, months: 36, residual_usd: 0}}
"""
    book = load_settings(config_path=_write(tmp_path, text), env={}).pricing
    a100 = "NVIDIA A100-SXM4-80GB"
    assert book.usd_per_gpu_hour(a100, datetime(2026, 11, 14, 23, 59, tzinfo=UTC)) == 2.5
    assert book.usd_per_gpu_hour(a100, datetime(2026, 11, 15, tzinfo=UTC)) == 2.0  # listed out of order
    assert book.usd_per_gpu_hour(a100, datetime(2025, 12, 31, tzinfo=UTC)) == 2.0  # the default, before any
    assert book.usd_per_gpu_hour("NVIDIA-H100-80GB-HBM3", NOW) == 4.0  # a plain number: all time
    assert book.usd_per_gpu_hour("NVIDIA-L4", NOW) == pytest.approx(9000 / (36 * 730))


def test_committed_rates_stack_and_cut_the_window(tmp_path: Path) -> None:
    text = """
pricing:
  products: {NVIDIA-H100-80GB-HBM3: 4.0}
  commitments:
    NVIDIA H100 80GB HBM3:
      - {from: 2026-11-01T00:00:00Z, until: 2027-11-01T00:00:00Z, gpus: 64, usd_per_gpu_hour: 2.5}
      - {from: 2026-11-10T00:00:00Z, until: 2026-11-20T00:00:00Z, gpus: 16, usd_per_gpu_hour: 3}
"""
    book = load_settings(config_path=_write(tmp_path, text), env={}).pricing
    h100 = "NVIDIA-H100-80GB-HBM3"
    at = np.asarray([datetime(2026, 11, d, tzinfo=UTC).timestamp() for d in (5, 15, 25)])
    rates, unused = book.blended(h100, at, np.asarray([100.0, 100.0, 50.0]))
    # 64 at 2.5 + 36 at 4; 64 at 2.5 + 16 at 3 + 20 at 4; 50 of the 64 at 2.5, 14 paid for with none there.
    assert rates.tolist() == pytest.approx([(160 + 144) / 100, (160 + 48 + 80) / 100, 2.5])
    assert unused.tolist() == pytest.approx([0.0, 0.0, 14 * 2.5])
    assert book.usd_per_gpu_hour(h100, NOW) == 4.0  # on demand, what a GPU beyond the commitments costs
    # A commitment's start and end change the rate: a history window is read in pieces cut there.
    changes = book.changes(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    assert [when.day for _, when in changes] == [10, 20]


def test_budgets_from_the_issue_example(tmp_path: Path) -> None:
    text = """
budgets: {monthly_usd: {research: 20000}, idle_usd_per_hour: {research: 5.5, vision: 0}}
"""
    budgets = load_settings(config_path=_write(tmp_path, text), env={}).budgets
    assert budgets.monthly_usd == {"research": 20000.0}
    assert budgets.idle_usd_per_hour == {"research": 5.5, "vision": 0.0}
    assert load_settings(env={}).budgets.monthly_usd == {}


def test_energy_tariff_from_the_issue_example_and_dated(tmp_path: Path) -> None:
    flat = "pricing: {energy: {usd_per_kwh: 0.12, pue: 1.3}}"
    tariff = load_settings(config_path=_write(tmp_path, flat), env={}).pricing.energy
    assert tariff is not None and tariff.pue == 1.3
    starts, prices = tariff.schedule()
    assert starts.tolist() == [float("-inf")] and prices.tolist() == [0.12]
    dated = """
pricing:
  energy:
    usd_per_kwh:
      - {from: 2026-11-15T00:00:00Z, usd_per_kwh: 0.15}
      - {from: 2026-01-01T00:00:00Z, usd_per_kwh: 0.12}
"""
    tariff = load_settings(config_path=_write(tmp_path, dated), env={}).pricing.energy
    assert tariff is not None and tariff.pue == 1.0  # no PUE given: the GPUs' own energy
    starts, prices = tariff.schedule()
    assert starts.tolist() == [
        datetime(2026, 1, 1, tzinfo=UTC).timestamp(),
        datetime(2026, 11, 15, tzinfo=UTC).timestamp(),
    ]
    assert prices.tolist() == [0.12, 0.15]
    assert load_settings(env={}).pricing.energy is None


CLUSTERS = """
prometheus: {url: http://thanos-query:9090, headers: {X-Scope-OrgID: fleet}}
kubernetes: {kubeconfig: /etc/gpuwatch/kubeconfig}
clusters:
  - name: eu-1
    context: eu-1-admin
  - name: us-1
    kubeconfig: /etc/gpuwatch/us-1.yaml
    prometheus: {headers: {X-Scope-OrgID: us}}
  - name: lab
    prometheus: {url: http://vm.lab:8428, matchers: {env: lab}}
"""


def test_clusters_inherit_the_fleets_store_and_are_told_apart_by_their_cluster_label(tmp_path: Path) -> None:
    s = load_settings(config_path=_write(tmp_path, CLUSTERS), env={})
    eu, us, lab = s.clusters
    assert [c.name for c in s.clusters] == ["eu-1", "us-1", "lab"]
    # On the shared store a cluster is its external label; with a store of its own, no matcher by default.
    assert (eu.prometheus.url, eu.matchers) == ("http://thanos-query:9090", {"cluster": "eu-1"})
    assert (lab.prometheus.url, lab.matchers) == ("http://vm.lab:8428", {"env": "lab"})
    assert eu.prometheus.headers == {"X-Scope-OrgID": "fleet"} and us.prometheus.headers == {
        "X-Scope-OrgID": "us"
    }
    assert (eu.kubernetes.kubeconfig, eu.kubernetes.context) == ("/etc/gpuwatch/kubeconfig", "eu-1-admin")
    assert (us.kubernetes.kubeconfig, us.kubernetes.context) == ("/etc/gpuwatch/us-1.yaml", None)
    assert s.cluster_name == ""  # several: no one name for the exporter to stamp
    one = load_settings(config_path=_write(tmp_path, "clusters: [{name: eu-1}]\n"), env={})
    assert one.cluster_name == "eu-1" and one.clusters[0].matchers == {"cluster": "eu-1"}
    assert load_settings(env={}).clusters == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "clusters: {name: eu-1}",
            "config: clusters must list at least one {name, kubeconfig, context, prometheus}",
        ),
        ("clusters: []", "config: clusters must list at least one"),
        ("clusters: [{kubeconfig: /k}]", "config: clusters[0] lacks name"),
        ("clusters: [{name: EU 1}]", "config: clusters[0].name must be a cluster name"),
        ("clusters: [{name: eu-1}, {name: eu-1}]", "config: clusters: 'eu-1' is listed twice"),
        ("clusters: [{name: eu-1, region: eu}]", "config: unknown key clusters[0].region"),
        (
            "clusters: [{name: eu-1, prometheus: {tenant: a}}]",
            "config: unknown key clusters[0].prometheus.tenant",
        ),
        (
            "clusters: [{name: eu-1, prometheus: {matchers: {cluster-name: a}}}]",
            "'cluster-name' is not a label name",
        ),
        (
            "clusters: [{name: eu-1, prometheus: {headers: [a]}}]",
            "clusters[0].prometheus.headers must be a mapping",
        ),
    ],
)
def test_bad_clusters_are_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(config_path=_write(tmp_path, text), env={})
    assert message in str(err.value)
    assert "\n" not in str(err.value)
