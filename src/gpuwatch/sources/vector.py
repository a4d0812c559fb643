"""Prometheus instant vectors decoded column by column: a month of per-pod series is ~600,000 label sets,
which json.loads would make as many dicts of (the answer's bytes ~ 100 MB, its dicts several times that)
before a frame is built of them. Here Arrow's JSON reader parses them straight into columns."""

import io
import threading
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

# An instant query's whole answer when Prometheus has no warnings or infos to add.
_HEAD: Final = b'{"status":"success","data":{"resultType":"vector","result":['
_TAIL: Final = b"]}}"
_ITEM: Final = b'{"metric":'
_VALUE: Final = b'"value":['
_BETWEEN: Final = b'"]},{"metric":'  # one sample's end and the next one's start
# Arrow's blocks: big enough that a block holds thousands of series, small enough to parse side by side.
_BLOCK_BYTES: Final = 8 << 20
# Answers this large are decoded one at a time. Decoding one holds about four times its bytes for a moment,
# and a month of per-pod series is ~100 MB: several decoded at once were most of serve's peak memory. One
# at a time costs no time to speak of: Arrow parses an answer's blocks on every core, and the byte
# rewriting before it holds the GIL anyway.
_LARGE_BYTES: Final = 16 << 20
_LARGE_DECODES = threading.Lock()


def vector_frame(body: bytes) -> pd.DataFrame | None:
    """The answer to an instant query as Points.frame() makes it (timestamp, value NaN where not finite,
    one str column per label with "" where absent), or None when it is not a plain vector answer of
    samples that share one timestamp (the caller then decodes it the general way).

    JSON escapes every quote inside a string, so the byte patterns _decoded() rewrites (each starting or
    ending at a bare quote) only ever match the answer's own structure, never a label value. Every sample
    of an instant vector carries the query's evaluation time: after rewriting `"value":[<time>,"<v>"]`
    as `"value":"<v>"` each sample is a flat JSON object, one per line."""
    if not body.startswith(_HEAD) or not body.endswith(_TAIL):
        return None
    if len(body) < _LARGE_BYTES:
        return _decoded(body)
    with _LARGE_DECODES:
        return _decoded(body)


def _decoded(body: bytes) -> pd.DataFrame | None:
    items = body[len(_HEAD) : -len(_TAIL)]
    samples = items.count(_ITEM)
    at = items.find(_VALUE)
    if samples == 0 or at < 0:
        return None
    comma = items.find(b",", at)
    stamp = items[at + len(_VALUE) : comma]
    try:
        seconds = float(stamp)
    except ValueError:
        return None
    prefix = _VALUE + stamp + b',"'
    if items.count(prefix) != samples or items.count(_BETWEEN) != samples - 1 or not items.endswith(b'"]}'):
        return None
    lines = items.replace(prefix, b'"value":"').replace(_BETWEEN, b'"}\n{"metric":')[:-3] + b'"}'
    try:
        options = pa_json.ReadOptions(block_size=_BLOCK_BYTES)
        table = pa_json.read_json(io.BytesIO(lines), read_options=options)
    except pa.ArrowInvalid:
        return None
    if table.num_rows != samples or table.column_names != ["metric", "value"]:
        return None
    metric = table.column("metric").combine_chunks()
    if not pa.types.is_struct(metric.type) or not pa.types.is_string(table.column("value").type):
        return None
    try:
        values = pc.cast(table.column("value"), pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        return None  # a value that is not a number: the general way makes it NaN
    milliseconds = np.full(samples, round(seconds * 1000.0), dtype=np.int64)
    columns: dict[str, object] = {
        "timestamp": pd.to_datetime(milliseconds, unit="ms", utc=True),
        "value": np.where(np.isfinite(values), values, np.nan),
    }
    names = [metric.type.field(k).name for k in range(metric.type.num_fields)]
    labels = dict(zip(names, metric.flatten(), strict=True))
    if metric.null_count or any(not pa.types.is_string(a.type) for a in labels.values()):
        return None
    for name in sorted(labels):
        columns[name] = pd.Series(pd.array(pc.fill_null(labels[name], ""), dtype="str"))
    return pd.DataFrame(columns)
