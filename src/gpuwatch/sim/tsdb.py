"""Prometheus TSDB blocks written straight from gpuwatch_* frames: XOR chunks, the index and meta.json.

The layout is Prometheus's own (tsdb/docs/format in its repository, index format 2): the samples promtool's
OpenMetrics backfill would store, without the text in between. At a month of a large fleet, writing and
parsing that text was most of the backfill's time. Every step works on whole arrays; the only per-item
Python is one CRC32-Castagnoli call per chunk, series and postings list, and a line per symbol.
"""

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt

from gpuwatch.core.errors import DataError
from gpuwatch.read.series import Family, series_codes

SAMPLES_PER_CHUNK = 120  # where Prometheus's head cuts a chunk
NAME_LABEL = "__name__"
_INDEX_HEADER = b"\xba\xaa\xd7\x00\x02"  # magic 0xBAAAD700, index format 2
_CHUNKS_HEADER = b"\x85\xbd\x40\xdd\x01\x00\x00\x00"  # magic 0x85BD40DD, format 1, 3 bytes of padding
_TOMBSTONES = b"\x01\x30\xba\x30\x01\x00\x00\x00\x00"  # magic 0x0130BA30, format 1, no stones (CRC 0)
_XOR_ENCODING = 1
_NO_WINDOW = 255  # a chunk's leading zeros before its first value change (xor.go's 0xff)
_ULID_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
Words = npt.NDArray[np.uint64]
Rows = tuple[npt.NDArray[Any], Ints]  # per row a run of items, one run after another, and the runs' lengths


@dataclass(frozen=True, slots=True)
class SampleTable:
    """Samples of many series as a block wants them: each series' label pairs as numbers of sorted symbols.

    Series are numbered in the index's order (label sets compared pair by pair), so any subset of them is
    written in number order.
    """

    symbols: list[str]  # sorted, distinct, "" first
    pairs: npt.NDArray[np.int32]  # per series: name, value, name, value... symbol numbers; -1 past the end
    series: npt.NDArray[np.int32]  # per sample
    ms: Ints  # per sample: timestamp in milliseconds
    values: npt.NDArray[np.float64]  # per sample


def sample_table(timed: Sequence[tuple[Family, float]]) -> SampleTable:
    """The samples of families whose timestamps are shifted by the given seconds, as promtool stores their
    OpenMetrics text (write_openmetrics): a label with an empty value is left out."""
    # Per family: its label names (__name__ among them, sorted) and per name its series' values.
    labelled: list[tuple[list[str], list[list[str]]]] = []
    strings = {"", NAME_LABEL}
    n_series = 0
    series, ms, values = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)], [np.zeros(0)]
    for family, offset_seconds in timed:
        samples = family.samples
        if samples.empty:
            continue
        names = sorted([NAME_LABEL, *family.labels])
        labels = [name for name in names if name != NAME_LABEL]
        codes, first_rows = series_codes(samples, labels)
        heads = samples[labels].iloc[first_rows].astype("str")
        columns = [[family.name] * len(first_rows) if n == NAME_LABEL else heads[n].tolist() for n in names]
        strings.update(names, *columns)
        series.append(n_series + codes)
        n_series += len(first_rows)
        labelled.append((names, columns))
        ms.append(
            samples["timestamp"].dt.as_unit("ms").astype("int64").to_numpy() + round(offset_seconds * 1000)
        )
        values.append(samples["value"].to_numpy(dtype=np.float64))
    symbols = sorted(strings)
    number = {s: i for i, s in enumerate(symbols)}
    width = 2 * max((len(names) for names, _ in labelled), default=1)
    pairs = np.concatenate(
        [np.zeros((0, width), dtype=np.int32)]
        + [_label_pairs(names, columns, number, width) for names, columns in labelled]
    )
    order = np.lexsort(pairs.T[::-1])  # label sets in the index's order; of two, the shorter first (-1 pads)
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return SampleTable(
        symbols=symbols,
        pairs=pairs[order],
        series=rank[np.concatenate(series)],
        ms=np.concatenate(ms),
        values=np.concatenate(values),
    )


def _label_pairs(
    names: list[str], columns: list[list[str]], number: dict[str, int], width: int
) -> npt.NDArray[np.int32]:
    """Per series its label pairs as symbol numbers (name, value, name, value... in name order), a label
    with an empty value left out, -1 after the last."""
    n = len(columns[0])
    pairs = np.full((n, width), -1, dtype=np.int32)
    for i, (name, column) in enumerate(zip(names, columns, strict=True)):
        values = np.array([number[v] for v in column], dtype=np.int32)
        pairs[:, 2 * i] = np.where(values > 0, number[name], -1)  # symbol 0 is "": no label
        pairs[:, 2 * i + 1] = np.where(values > 0, values, -1)
    # Each row's remaining pairs moved left over the holes, in order.
    pair_order = np.argsort(pairs[:, 0::2] < 0, axis=1, kind="stable")
    column_order = np.stack([2 * pair_order, 2 * pair_order + 1], axis=2).reshape(n, width)
    return np.take_along_axis(pairs, column_order, axis=1)


def write_block(tsdb: Path, table: SampleTable, start_ms: int, end_ms: int) -> int:
    """Write the table's samples timestamped in [start_ms, end_ms) as one block into `tsdb` (a Prometheus
    --storage.tsdb.path); returns the number of samples written (none: no block)."""
    inside = (table.ms >= start_ms) & (table.ms < end_ms)
    if not inside.any():
        return 0
    series, ms, values = table.series[inside], table.ms[inside], table.values[inside]
    order = np.argsort(series.astype(np.int64) * (end_ms - start_ms) + (ms - start_ms))
    series, ms, values = series[order], ms[order], values[order]
    if np.any((series[1:] == series[:-1]) & (ms[1:] == ms[:-1])):
        raise DataError("two samples of one series at one timestamp")
    present, block_series = np.unique(series, return_inverse=True)
    first, size = _chunks_of(block_series)
    chunks, refs = _chunks_file(ms, values, first, size)
    index = _index(table, present, block_series[first], ms[first], ms[first + size - 1], refs)
    ulid = _ulid()
    building = tsdb / f"{ulid}.tmp-for-creation"  # Prometheus deletes such leftovers when it opens the DB
    (building / "chunks").mkdir(parents=True)
    (building / "chunks" / "000001").write_bytes(chunks)
    (building / "index").write_bytes(index)
    (building / "tombstones").write_bytes(_TOMBSTONES)
    meta = {
        "ulid": ulid,
        "minTime": int(ms.min()),
        "maxTime": int(ms.max()) + 1,  # a block is half-open: [minTime, maxTime)
        "stats": {"numSamples": len(ms), "numSeries": len(present), "numChunks": len(first)},
        "compaction": {"level": 1, "sources": [ulid]},
        "version": 1,
    }
    (building / "meta.json").write_text(json.dumps(meta, indent="\t"), encoding="utf-8")
    building.rename(tsdb / ulid)
    return len(ms)


def _chunks_of(series: Ints) -> tuple[Ints, Ints]:
    """First sample and size of each chunk of samples sorted by series, then time: a series' samples cut
    every SAMPLES_PER_CHUNK."""
    starts = np.flatnonzero(np.r_[True, series[1:] != series[:-1]])
    rank = np.arange(len(series)) - np.repeat(starts, np.diff(np.r_[starts, len(series)]))
    first = np.flatnonzero(rank % SAMPLES_PER_CHUNK == 0)
    return first, np.diff(np.r_[first, len(series)])


def _ulid() -> str:
    """A block's name: 48 bits of milliseconds and 80 random bits, in Crockford's base 32."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join(_ULID_DIGITS[(value >> shift) & 31] for shift in range(125, -1, -5))


# ----------------------------------------------------------------------------------------------------
# Chunks


def _chunks_file(ms: Ints, values: npt.NDArray[np.float64], first: Ints, size: Ints) -> tuple[bytes, Ints]:
    """The chunks segment file of the samples, and each chunk's reference (its offset in the file)."""
    data = _xor_chunks(ms, values, first, size)
    encoding = (np.full(len(first), _XOR_ENCODING, dtype=np.uint8), np.ones(len(first), dtype=np.int64))
    body = _concat_rows(encoding, data)
    records = _concat_rows(_uvarints(data[1].astype(np.uint64)), body, _crcs(body))
    refs = len(_CHUNKS_HEADER) + np.cumsum(records[1]) - records[1]
    return _CHUNKS_HEADER + records[0].tobytes(), refs


def _xor_chunks(ms: Ints, values: npt.NDArray[np.float64], first: Ints, size: Ints) -> Rows:
    """Each chunk's XOR encoding (Prometheus chunkenc/xor.go).

    A chunk opens with whole bytes: its sample count, first timestamp and value, and the second
    timestamp's delta. Bit fields follow: per later sample its timestamp's delta of deltas (from the third
    sample on) and its value XOR the previous one, written in a window of leading and trailing zeros
    that is kept while the XORs fit in it.
    """
    n_chunks = len(first)
    chunk = np.repeat(np.arange(n_chunks), size)
    position = np.arange(len(ms)) - np.repeat(first, size)
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    two = size > 1
    second_delta = np.zeros(n_chunks, dtype=np.uint64)
    second_delta[two] = ms[first[two] + 1] - ms[first[two]]
    delta_bytes, delta_len = _uvarints(second_delta)
    head = _concat_rows(
        _big_endian(size, ">u2"),
        _uvarints(_zigzag(ms[first])),
        _big_endian(bits[first], ">u8"),
        (delta_bytes[np.repeat(two, delta_len)], np.where(two, delta_len, 0)),
    )
    later = np.flatnonzero(position >= 1)
    third_on = np.flatnonzero(position[later] >= 2)
    at = later[third_on]
    dod, dod_width, dod_rest, dod_rest_width = (np.zeros(len(later), dtype=np.uint64) for _ in range(4))
    dod[third_on], dod_width[third_on], dod_rest[third_on], dod_rest_width[third_on] = _dod_fields(
        ms[at] - 2 * ms[at - 1] + ms[at - 2]
    )
    control, control_width, inside, inside_width = _xor_fields(bits[later] ^ bits[later - 1], size)
    # A sample's fields joined into the first while they fit in 64 bits, over empty slots only (the bits
    # stay in order): an unchanged sample at the usual step is one 2-bit field.
    fields = np.stack([dod, dod_rest, control, inside], axis=1)
    widths = np.stack([dod_width, dod_rest_width, control_width, inside_width], axis=1).astype(np.int64)
    for right in (2, 3):
        joined = widths[:, 0] + widths[:, right]
        merge = ~widths[:, 1:right].any(axis=1) & (joined <= 64) & (widths[:, right] < 64)
        shift = np.where(merge, widths[:, right], 0).astype(np.uint64)
        fields[:, 0] = np.where(merge, fields[:, 0] << shift | fields[:, right], fields[:, 0])
        widths[:, 0] = np.where(merge, joined, widths[:, 0])
        widths[:, right] = np.where(merge, 0, widths[:, right])
    used = widths.ravel() > 0
    tail = _pack_bits(fields.ravel()[used], widths.ravel()[used], np.repeat(chunk[later], 4)[used], n_chunks)
    return _concat_rows(head, tail)


def _dod_fields(dod: Ints) -> tuple[Words, Ints, Words, Ints]:
    """A timestamp's delta of deltas: 0 as one bit; else a prefix and 14, 17 or 20 bits (two's complement)
    when it fits, or the prefix 0b1111 and 64 bits as a second field."""
    first = np.zeros(len(dod), dtype=np.uint64)
    width = np.ones(len(dod), dtype=np.int64)
    raw = dod.astype(np.uint64)
    done = dod == 0
    for prefix, bits in ((0b10, 14), (0b110, 17), (0b1110, 20)):
        fits = ~done & (dod >= -((1 << (bits - 1)) - 1)) & (dod <= 1 << (bits - 1))
        first[fits] = np.uint64(prefix << bits) | (raw[fits] & np.uint64((1 << bits) - 1))
        width[fits] = prefix.bit_length() + bits
        done |= fits
    first[~done] = 0b1111
    width[~done] = 4
    return first, width, np.where(done, 0, raw).astype(np.uint64), np.where(done, 0, 64)


def _xor_fields(xor: Words, size: Ints) -> tuple[Words, Ints, Words, Ints]:
    """Per sample after its chunk's first (chunks of `size` samples, back to back), its value XOR the previous
    one: 0 as one bit; else 0b10 and the bits inside the chunk's current window of leading and trailing
    zeros when they fit it, or 0b11, a new window (5 bits of leading zeros, at most 31; 6 of significant
    bits, 64 written as 0) and the bits inside it. Returns the control field and the bits, with widths."""
    changed = xor != 0
    leading = np.minimum(64 - _bit_length(xor), 31)
    trailing = np.where(changed, _bit_length(xor & (~xor + np.uint64(1))) - 1, 0)
    kept = np.zeros(len(xor), dtype=np.bool_)
    window_leading, window_trailing = leading.copy(), trailing.copy()
    # The window passes from sample to sample: one step per position in the chunk, across all chunks.
    longest_first = np.argsort(-size, kind="stable")
    first_later = np.cumsum(size - 1) - (size - 1)  # where each chunk's samples after the first begin
    current_leading = np.full(len(size), _NO_WINDOW, dtype=np.int64)
    current_trailing = np.zeros(len(size), dtype=np.int64)
    for step in range(int(size.max(initial=1)) - 1):
        c = longest_first[: np.searchsorted(-size[longest_first], -(step + 2), side="right")]
        rows = first_later[c] + step
        fits = (
            changed[rows]
            & (current_leading[c] != _NO_WINDOW)
            & (leading[rows] >= current_leading[c])
            & (trailing[rows] >= current_trailing[c])
        )
        kept[rows] = fits
        window_leading[rows] = np.where(fits, current_leading[c], leading[rows])
        window_trailing[rows] = np.where(fits, current_trailing[c], trailing[rows])
        new = changed[rows] & ~fits
        current_leading[c[new]] = leading[rows[new]]
        current_trailing[c[new]] = trailing[rows[new]]
    significant = 64 - window_leading - window_trailing
    new_window = (
        np.uint64(0b11 << 11)
        | (window_leading.astype(np.uint64) << np.uint64(6))
        | (significant.astype(np.uint64) & np.uint64(63))
    )
    control = np.where(changed, np.where(kept, np.uint64(0b10), new_window), np.uint64(0)).astype(np.uint64)
    control_width = np.where(changed, np.where(kept, 2, 13), 1)
    inside = np.where(changed, xor >> window_trailing.astype(np.uint64), np.uint64(0)).astype(np.uint64)
    return control, control_width, inside, np.where(changed, significant, 0)


def _pack_bits(fields: Words, widths: Ints, row: Ints, n_rows: int) -> Rows:
    """Per row, its bit fields (right-aligned values of the given widths, 1 to 64) written most significant
    bit first, one after another, zero-padded to whole bytes. Fields come sorted by row."""
    row_bits = np.bincount(row, weights=widths, minlength=n_rows).astype(np.int64)
    row_bytes = (row_bits + 7) // 8
    field_start = np.cumsum(widths) - widths
    bits_before = np.cumsum(row_bits) - row_bits
    position = 8 * (np.cumsum(row_bytes) - row_bytes)[row] + field_start - bits_before[row]
    word = position >> 6
    end = (position & 63) + widths  # past the field's last bit, counted from its first word's first bit
    fits = end <= 64
    words = np.zeros(int(row_bytes.sum()) // 8 + 2, dtype=np.uint64)
    left = np.where(fits, 64 - end, 0).astype(np.uint64)
    right = np.where(fits, 0, end - 64).astype(np.uint64)
    _or_into(words, word, np.where(fits, fields << left, fields >> right))
    spill = ~fits
    _or_into(words, word[spill] + 1, fields[spill] << (128 - end[spill]).astype(np.uint64))
    return words.astype(">u8").view(np.uint8)[: int(row_bytes.sum())], row_bytes


def _or_into(words: Words, word: Ints, bits: Words) -> None:
    """words[word] |= bits, for word indices sorted ascending (repeats OR together)."""
    if not len(word):
        return
    starts = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])
    words[word[starts]] |= np.bitwise_or.reduceat(bits, starts)


def _bit_length(x: Words) -> Ints:
    """Bits needed for each value (0 for 0), exactly: halves of 32 bits convert to float64 without loss."""
    high = np.frexp((x >> np.uint64(32)).astype(np.float64))[1]
    low = np.frexp((x & np.uint64(0xFFFFFFFF)).astype(np.float64))[1]
    return np.where(high > 0, 32 + high, low).astype(np.int64)


# ----------------------------------------------------------------------------------------------------
# Index


def _index(
    table: SampleTable,
    present: npt.NDArray[np.int32],
    chunk_series: Ints,
    chunk_min: Ints,
    chunk_max: Ints,
    refs: Ints,
) -> bytes:
    """The index of the block's series (table numbers `present`) and their chunks."""
    pairs = table.pairs[present]
    used = np.union1d([0], pairs[pairs >= 0])  # "" as well, as Prometheus's own index has it
    symbols = [table.symbols[i] for i in used.tolist()]
    local = np.where(pairs >= 0, np.searchsorted(used, np.maximum(pairs, 0)), -1)
    out = bytearray(_INDEX_HEADER)
    symbols_at = len(out)
    encoded = [s.encode() for s in symbols]
    body = len(encoded).to_bytes(4, "big") + b"".join(_uvarint(len(s)) + s for s in encoded)
    out += _section(body)
    series_at = len(out)
    out += bytes(-len(out) % 16)
    series_bytes, series_refs = _series_section(local, chunk_series, chunk_min, chunk_max, refs, len(out))
    out += series_bytes
    label_indices_at = len(out)
    names, values, postings = _postings_lists(local, series_refs)
    label_offsets = []
    for name in np.unique(names).tolist():
        out += bytes(-len(out) % 4)
        label_offsets.append((symbols[name], len(out)))
        refs_of_name = values[names == name].astype(">u4").tobytes()
        out += _section(b"\x00\x00\x00\x01" + int(np.sum(names == name)).to_bytes(4, "big") + refs_of_name)
    out += bytes(-len(out) % 4)
    postings_at = len(out)
    lists, list_len = postings
    offsets = postings_at + 4 * (np.cumsum(list_len) - list_len)
    out += lists.astype(">u4").tobytes()
    label_table_at = len(out)
    entries = b"".join(b"\x01" + _string(name) + _uvarint(offset) for name, offset in label_offsets)
    out += _section(len(label_offsets).to_bytes(4, "big") + entries)
    postings_table_at = len(out)
    keys = [
        ("", ""),
        *((symbols[n], symbols[v]) for n, v in zip(names.tolist(), values.tolist(), strict=True)),
    ]
    entries = b"".join(
        b"\x02" + _string(name) + _string(value) + _uvarint(offset)
        for (name, value), offset in zip(keys, offsets.tolist(), strict=True)
    )
    out += _section(len(keys).to_bytes(4, "big") + entries)
    toc = b"".join(
        at.to_bytes(8, "big")
        for at in (symbols_at, series_at, label_indices_at, label_table_at, postings_at, postings_table_at)
    )
    out += toc + _crc(toc).to_bytes(4, "big")
    return bytes(out)


def _series_section(
    local: npt.NDArray[np.int32], chunk_series: Ints, chunk_min: Ints, chunk_max: Ints, refs: Ints, at: int
) -> tuple[bytes, Ints]:
    """The series entries, each 16-byte aligned, from file offset `at` (aligned): per series its label
    pairs and chunk metas (the first chunk's mint, then deltas). Returns the bytes and each series'
    reference (its offset / 16)."""
    n = len(local)
    n_labels = (local[:, 0::2] >= 0).sum(axis=1)
    n_chunks = np.bincount(chunk_series, minlength=n)
    first_of_series = np.r_[True, chunk_series[1:] != chunk_series[:-1]]
    previous_max = np.r_[0, chunk_max[:-1]]
    previous_ref = np.r_[0, refs[:-1]]
    starts = np.where(first_of_series, _zigzag(chunk_min), (chunk_min - previous_max).astype(np.uint64))
    ref_deltas = np.where(first_of_series, refs.astype(np.uint64), _zigzag(refs - previous_ref))
    metas = np.stack([starts, (chunk_max - chunk_min).astype(np.uint64), ref_deltas], axis=1).ravel()
    label_items = local[local >= 0].astype(np.uint64)
    items = _concat_rows(
        (n_labels.astype(np.uint64), np.ones(n, dtype=np.int64)),
        (label_items, 2 * n_labels),
        (n_chunks.astype(np.uint64), np.ones(n, dtype=np.int64)),
        (metas, 3 * n_chunks),
    )
    item_bytes, item_len = _uvarints(items[0])
    item_series = np.repeat(np.arange(n), items[1])
    content = (item_bytes, np.bincount(item_series, weights=item_len, minlength=n).astype(np.int64))
    entry = _concat_rows(_uvarints(content[1].astype(np.uint64)), content, _crcs(content))
    padded = entry[1] + (-entry[1] % 16)
    starts_at = at + np.cumsum(padded) - padded
    padding = (np.zeros(int((padded - entry[1]).sum()), dtype=np.uint8), padded - entry[1])
    section = _concat_rows(entry, padding)[0][: int(padded.sum() - padding[1][-1])]  # none after the last
    return section.tobytes(), starts_at // 16


def _postings_lists(local: npt.NDArray[np.int32], series_refs: Ints) -> tuple[Ints, Ints, Rows]:
    """Per label pair (sorted by name, then value), its name and value symbols; and the postings lists:
    the one of every series first, then one per pair, each [length, count, series refs..., CRC] in 4-byte
    words (big-endian when written)."""
    names, values = local[:, 0::2], local[:, 1::2]
    has = names >= 0
    pair_name, pair_value = names[has].astype(np.int64), values[has].astype(np.int64)
    pair_ref = np.broadcast_to(series_refs[:, None], names.shape)[has]
    order = np.lexsort((pair_ref, pair_value, pair_name))
    pair_name, pair_value, pair_ref = pair_name[order], pair_value[order], pair_ref[order]
    new_pair = (pair_name[1:] != pair_name[:-1]) | (pair_value[1:] != pair_value[:-1])
    starts = np.flatnonzero(np.r_[True, new_pair])
    counts = np.diff(np.r_[starts, len(pair_ref)])
    refs = np.r_[series_refs, pair_ref].astype(np.uint32)
    counts = np.r_[len(series_refs), counts]
    body = _concat_rows((counts.astype(np.uint32), np.ones(len(counts), dtype=np.int64)), (refs, counts))
    body_bytes = (body[0].astype(">u4").view(np.uint8), 4 * body[1])
    crc = np.frombuffer(_crcs(body_bytes)[0].tobytes(), dtype=">u4").astype(np.uint32)
    length = (4 * body[1]).astype(np.uint32)
    ones = np.ones(len(counts), dtype=np.int64)
    lists = _concat_rows((length, ones), body, (crc, ones))
    return pair_name[starts], pair_value[starts], lists


def _section(body: bytes) -> bytes:
    """A section: its length (4 bytes), the body, and the body's CRC32-Castagnoli."""
    return len(body).to_bytes(4, "big") + body + _crc(body).to_bytes(4, "big")


def _crc(data: bytes) -> int:
    """CRC32-Castagnoli, as every checksum of a block is."""
    return int(google_crc32c.value(data))


def _string(text: str) -> bytes:
    raw = text.encode()
    return _uvarint(len(raw)) + raw


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ----------------------------------------------------------------------------------------------------
# Vectorised encoding


def _concat_rows(*pieces: Rows) -> Rows:
    """Per row, the pieces' runs one after another (each piece: its rows' runs back to back, and their
    lengths)."""
    lengths = np.sum([length for _, length in pieces], axis=0).astype(np.int64)
    out = np.empty(int(lengths.sum()), dtype=np.result_type(*(items for items, _ in pieces)))
    before = np.cumsum(lengths) - lengths
    for items, length in pieces:
        out[np.repeat(before - (np.cumsum(length) - length), length) + np.arange(len(items))] = items
        before = before + length
    return out, lengths


def _uvarints(values: Words) -> Rows:
    """Each value as a uvarint (7 bits a byte, least significant first, high bit set on all but the last)."""
    values = values.astype(np.uint64)
    length = np.maximum(1, (_bit_length(values) + 6) // 7)
    item = np.repeat(np.arange(len(values)), length)
    k = np.arange(len(item)) - np.repeat(np.cumsum(length) - length, length)
    more = (k < length[item] - 1).astype(np.uint64) << np.uint64(7)
    seven = (values[item] >> (7 * k).astype(np.uint64)) & np.uint64(0x7F)
    return (seven | more).astype(np.uint8), length


def _zigzag(values: Ints) -> Words:
    """Signed to unsigned as Go's binary.PutVarint does: 0, -1, 1, -2... to 0, 1, 2, 3..."""
    signed = values.astype(np.int64)
    return ((signed << 1) ^ (signed >> 63)).astype(np.uint64)


def _big_endian(values: npt.NDArray[Any], dtype: str) -> Rows:
    raw = np.ascontiguousarray(values).astype(dtype).view(np.uint8)
    size = np.dtype(dtype).itemsize
    return raw, np.full(len(values), size, dtype=np.int64)


def _crcs(rows: Rows) -> Rows:
    """Each run's CRC32-Castagnoli, as 4 big-endian bytes."""
    data = rows[0].tobytes()
    ends = np.cumsum(rows[1])
    starts = ends - rows[1]
    crc = [_crc(data[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    return _big_endian(np.array(crc, dtype=np.uint32), ">u4")
