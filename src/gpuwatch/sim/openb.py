"""The openb trace files (Weng et al., "Beware of Fragmentation", USENIX ATC'23): parse and validate."""

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpuwatch.core.errors import DataError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
MAX_GPUS_PER_POD = 8
MILLI_PER_GPU = 1000

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MISSING = ("", "nan", "NaN", "NAN")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class OpenbTrace:
    """A validated openb node list and pod list (columns as in the trace README; times in seconds).

    nodes: sn, cpu_milli, memory_mib, gpu (int64), model ("" = none).
    pods: name, cpu_milli, memory_mib, num_gpu, gpu_milli (int64), gpu_spec ("" = any model), qos,
    pod_phase, creation_time, deletion_time, scheduled_time (float64 seconds; NaN = never scheduled).
    """

    nodes: pd.DataFrame
    pods: pd.DataFrame


def load_openb(nodes_csv: Path, pods_csv: Path) -> OpenbTrace:
    """Parse and validate the openb node and pod lists (Weng et al., "Beware of Fragmentation", ATC'23).

    Any problem raises a one-line DataError naming the file, the line and what is wrong.
    """
    return OpenbTrace(nodes=_load_nodes(Path(nodes_csv)), pods=_load_pods(Path(pods_csv)))


def _fail(path: Path, line: int | None, problem: str) -> DataError:
    where = f"{path}:{line}" if line is not None else f"{path}"
    return DataError(f"{where}: {problem}".replace("\n", " ").replace("\r", " "))


def _show(raw: str) -> str:
    """A field value quoted for a one-line message (repr escapes newlines; long values are cut)."""
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def _read_table(path: Path, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """Rows of a CSV file with exactly `columns` (any order) as (line number, column -> raw text)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise _fail(path, None, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, None, "is a directory, not a CSV file") from None
    except UnicodeDecodeError as e:
        raise _fail(path, None, f"not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise _fail(path, None, f"cannot read ({e.strerror or e})") from None
    if not text.strip():
        raise _fail(path, None, "empty file")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        header = [h.strip() for h in next(reader)]
        seen: set[str] = set()
        for h in header:
            if h in seen:
                raise _fail(path, 1, f"duplicate column {_show(h)}")
            seen.add(h)
        for c in columns:
            if c not in seen:
                raise _fail(path, 1, f"missing column {c!r}")
        for h in header:
            if h not in columns:
                raise _fail(path, 1, f"unknown column {_show(h)}")
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue  # blank line
            if len(fields) != len(header):
                raise _fail(path, reader.line_num, f"expected {len(header)} fields, got {len(fields)}")
            rows.append((reader.line_num, {h: f.strip() for h, f in zip(header, fields, strict=True)}))
    except csv.Error as e:
        raise _fail(path, reader.line_num, f"malformed CSV ({e})") from None
    if not rows:
        raise _fail(path, None, "has a header but no rows")
    return rows


def _number(path: Path, line: int, column: str, raw: str) -> float:
    if not _NUMBER.fullmatch(raw):
        raise _fail(path, line, f"{column} {_show(raw)} is not a number")
    return float(raw)


def _count(path: Path, line: int, column: str, raw: str) -> int:
    value = _number(path, line, column, raw)
    if value != int(value):
        raise _fail(path, line, f"{column} {_show(raw)} is not a whole number")
    if value < 0:
        raise _fail(path, line, f"{column} {raw} is negative")
    return int(value)


def _seconds(path: Path, line: int, column: str, raw: str) -> float:
    value = _number(path, line, column, raw)
    if value < 0:
        raise _fail(path, line, f"{column} {raw} is negative")
    return value


def _optional(raw: str) -> str:
    return "" if raw in _MISSING else raw


def _load_nodes(path: Path) -> pd.DataFrame:
    cols: dict[str, list[object]] = {c: [] for c in NODE_COLUMNS}
    names: set[str] = set()
    for line, row in _read_table(path, NODE_COLUMNS):
        sn = row["sn"]
        if not _TOKEN.fullmatch(sn):
            raise _fail(path, line, f"sn {_show(sn)} is not a node name")
        if sn in names:
            raise _fail(path, line, f"duplicate node {_show(sn)}")
        names.add(sn)
        gpu = _count(path, line, "gpu", row["gpu"])
        model = _optional(row["model"])
        if gpu > 0 and not model:
            raise _fail(path, line, f"node with {gpu} GPUs has no model")
        if model and not _TOKEN.fullmatch(model):
            raise _fail(path, line, f"model {_show(model)} is not a GPU model name")
        cols["sn"].append(sn)
        cols["cpu_milli"].append(_count(path, line, "cpu_milli", row["cpu_milli"]))
        cols["memory_mib"].append(_count(path, line, "memory_mib", row["memory_mib"]))
        cols["gpu"].append(gpu)
        cols["model"].append(model)
    return pd.DataFrame(
        {
            "sn": pd.Series(cols["sn"], dtype="str"),
            "cpu_milli": pd.Series(cols["cpu_milli"], dtype="int64"),
            "memory_mib": pd.Series(cols["memory_mib"], dtype="int64"),
            "gpu": pd.Series(cols["gpu"], dtype="int64"),
            "model": pd.Series(cols["model"], dtype="str"),
        }
    )


def _load_pods(path: Path) -> pd.DataFrame:
    cols: dict[str, list[object]] = {c: [] for c in POD_COLUMNS}
    names: set[str] = set()
    for line, row in _read_table(path, POD_COLUMNS):
        name = row["name"]
        if not _TOKEN.fullmatch(name):
            raise _fail(path, line, f"name {_show(name)} is not a pod name")
        if name in names:
            raise _fail(path, line, f"duplicate pod {_show(name)}")
        names.add(name)
        num_gpu = _count(path, line, "num_gpu", row["num_gpu"])
        if num_gpu > MAX_GPUS_PER_POD:
            raise _fail(path, line, f"num_gpu {num_gpu} is above {MAX_GPUS_PER_POD}")
        milli_raw = row["gpu_milli"]
        milli_value = _number(path, line, "gpu_milli", milli_raw)
        if not 0 <= milli_value <= MILLI_PER_GPU:
            raise _fail(path, line, f"gpu_milli {milli_raw} is outside 0..{MILLI_PER_GPU}")
        milli = _count(path, line, "gpu_milli", milli_raw)
        if num_gpu == 0 and milli != 0:
            raise _fail(path, line, f"gpu_milli {milli} on a pod with num_gpu 0")
        if num_gpu == 1 and milli == 0:
            raise _fail(path, line, "gpu_milli 0 on a pod with num_gpu 1")
        if num_gpu > 1 and milli != MILLI_PER_GPU:
            raise _fail(path, line, f"gpu_milli {milli} on a {num_gpu}-GPU pod (sharing needs num_gpu 1)")
        spec = _optional(row["gpu_spec"])
        if spec and not all(_TOKEN.fullmatch(m) for m in spec.split("|")):
            raise _fail(path, line, f"gpu_spec {_show(spec)} is not a |-separated list of GPU models")
        qos = row["qos"]
        if not _TOKEN.fullmatch(qos):
            raise _fail(path, line, f"qos {_show(qos)} is not a QoS class")
        phase = row["pod_phase"]
        if phase not in POD_PHASES:
            raise _fail(path, line, f"pod_phase {_show(phase)} is not one of {', '.join(POD_PHASES)}")
        created = _seconds(path, line, "creation_time", row["creation_time"])
        deleted = _seconds(path, line, "deletion_time", row["deletion_time"])
        if deleted < created:
            raise _fail(
                path,
                line,
                f"deletion_time {row['deletion_time']} is before creation_time {row['creation_time']}",
            )
        sched_raw = _optional(row["scheduled_time"])
        scheduled = math.nan
        if sched_raw:
            scheduled = _seconds(path, line, "scheduled_time", sched_raw)
            if scheduled < created:
                raise _fail(
                    path, line, f"scheduled_time {sched_raw} is before creation_time {row['creation_time']}"
                )
        cols["name"].append(name)
        cols["cpu_milli"].append(_count(path, line, "cpu_milli", row["cpu_milli"]))
        cols["memory_mib"].append(_count(path, line, "memory_mib", row["memory_mib"]))
        cols["num_gpu"].append(num_gpu)
        cols["gpu_milli"].append(milli)
        cols["gpu_spec"].append(spec)
        cols["qos"].append(qos)
        cols["pod_phase"].append(phase)
        cols["creation_time"].append(created)
        cols["deletion_time"].append(deleted)
        cols["scheduled_time"].append(scheduled)
    ints = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
    floats = ("creation_time", "deletion_time", "scheduled_time")
    return pd.DataFrame(
        {
            c: pd.Series(v, dtype="int64" if c in ints else "float64" if c in floats else "str")
            for c, v in cols.items()
        }
    )
