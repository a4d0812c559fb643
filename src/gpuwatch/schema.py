"""DataFrame contracts (column names and dtypes) checked where frames cross a layer boundary."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from gpuwatch.errors import DataError


def _is_kind(series: "pd.Series[Any]", kind: str) -> bool:
    """Column kinds: "time" tz-aware UTC, "str" strings, "float" float64 (NaN = unknown), "int"."""
    dtype = series.dtype
    if kind == "time":
        return isinstance(dtype, pd.DatetimeTZDtype) and str(dtype.tz) == "UTC"
    if kind == "str":
        return bool(pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype))
    if kind == "float":
        return bool(pd.api.types.is_float_dtype(dtype))
    return bool(pd.api.types.is_integer_dtype(dtype))


@dataclass(frozen=True, slots=True)
class Contract:
    """A named set of required columns and their kinds; extra columns are allowed."""

    name: str
    columns: Mapping[str, str]

    def check(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Return the frame unchanged, or raise DataError naming the first broken column."""
        for column, kind in self.columns.items():
            if column not in frame.columns:
                raise DataError(f"{self.name}: missing column {column!r}")
            if not _is_kind(frame[column], kind):
                raise DataError(f"{self.name}: column {column!r} is {frame[column].dtype}, expected {kind}")
        return frame

    def empty(self) -> pd.DataFrame:
        dtypes = {"time": "datetime64[ns, UTC]", "str": "str", "float": "float64", "int": "int64"}
        return pd.DataFrame({c: pd.Series(dtype=dtypes[k]) for c, k in self.columns.items()})


# Per GPU (or MIG instance) and sample: what DCGM reported, in base units.
GPU_SAMPLES = Contract(
    "gpu_samples",
    {
        "timestamp": "time",
        "node": "str",
        "uuid": "str",
        "gpu_instance_id": "str",
        "util_ratio": "float",
    },
)

# Per pod, GPU and sample: who held how many GPU-equivalents, and the GPU's utilization.
ATTRIBUTED = Contract(
    "attributed",
    {
        "timestamp": "time",
        "namespace": "str",
        "pod": "str",
        "team": "str",
        "node": "str",
        "pool": "str",
        "uuid": "str",
        "gpu_instance_id": "str",
        "ge_share": "float",
        "util_ratio": "float",
    },
)
