"""Right-sizing with dollars: each workload's smallest fit (GPUs, MIG, time-slice, product) and GPUs freed."""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.analytics.ledger import group_codes
from gpuwatch.core.errors import ConfigError, DataError
from gpuwatch.core.model import (
    HOURS_PER_MONTH,
    MIG_SLICES_PER_GPU,
    PriceBook,
    mig_profile_slices,
    normalize_product,
)
from gpuwatch.core.schema import RIGHTSIZE_PACKING, RIGHTSIZE_RECOMMENDATIONS, RIGHTSIZE_WORKLOADS
from gpuwatch.core.units import BYTES_PER_MIB

Floats = npt.NDArray[np.float64]

BYTES_PER_GIB: Final = 1024 * BYTES_PER_MIB
# GE and framebuffer comparisons are on float sums and products (7 × 1/7, 0.2 × 1.2): within this is equal.
EPSILON_GE: Final = 1e-9
EPSILON_USD_PER_HOUR: Final = 1e-9
# Recommendation kinds; the first four in the order that breaks a tie of equal $/h.
KINDS: Final = ("gpus", "mig", "time_slice", "product")
KEEP: Final = "keep"
UNKNOWN: Final = "unknown"


# ----------------------------------------------------------------------------------------------------
# GPU products: MIG profiles and framebuffer


@dataclass(frozen=True, slots=True, kw_only=True)
class MigProfile:
    """A MIG GPU-instance profile ("2g.20gb"): compute slices of the GPU's gpu_slices, and its memory.

    memory_bytes is the profile name's nominal size read as GiB (20gb → 20 × 1024³ bytes). The usable
    memory nvidia-smi reports is a little less (19.5 GiB for an A100-80GB 2g.20gb); the headroom covers it.
    """

    name: str
    compute_slices: int
    gpu_slices: int  # compute slices of the whole GPU: 7, or 4 on an A30
    memory_bytes: float

    @property
    def fraction(self) -> float:
        """Share of the GPU it holds, used both to fit compute and to price it (GE × price).

        compute_slices / gpu_slices: slices/7 as SPEC §3 counts a MIG GE, except on the 4-slice A30,
        where a 1g.6gb is a quarter of the GPU (the ledger, which counts every MIG slice as 1/7,
        undercounts A30 instances).
        """
        return self.compute_slices / self.gpu_slices


def _profiles(gpu_slices: int, *names: str) -> tuple[MigProfile, ...]:
    return tuple(
        MigProfile(
            name=name,
            compute_slices=mig_profile_slices(name),
            gpu_slices=gpu_slices,
            memory_bytes=float(name.split(".")[1].removesuffix("gb")) * BYTES_PER_GIB,
        )
        for name in names
    )


# The GPU-instance profiles of the NVIDIA MIG user guide ("Supported MIG Profiles") and the default
# nvidia-mig-parted config, keyed by model key (gpu_model). Media-extension variants (+me) hold the same
# compute and memory as their base profile and are left out.
MIG_PROFILES: Final[Mapping[str, tuple[MigProfile, ...]]] = {
    "A100-40GB": _profiles(
        MIG_SLICES_PER_GPU, "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"
    ),
    "A100-80GB": _profiles(
        MIG_SLICES_PER_GPU, "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"
    ),
    "H100-80GB": _profiles(
        MIG_SLICES_PER_GPU, "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"
    ),
    "H100-94GB": _profiles(
        MIG_SLICES_PER_GPU, "1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"
    ),
    "H200-141GB": _profiles(
        MIG_SLICES_PER_GPU, "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"
    ),
    "A30-24GB": _profiles(4, "1g.6gb", "2g.12gb", "4g.24gb"),
}

# Nominal framebuffer per model key, in GiB (what the product name says; the driver reports slightly
# less, e.g. 79.6 GiB on an H100 80GB, 22.5 GiB on an L4, which the headroom covers).
FRAMEBUFFER_GIB: Final[Mapping[str, float]] = {
    "A100-40GB": 40.0,
    "A100-80GB": 80.0,
    "H100-80GB": 80.0,
    "H100-94GB": 94.0,
    "H200-141GB": 141.0,
    "A30-24GB": 24.0,
    "L4-24GB": 24.0,
    "L40S-48GB": 48.0,
    "L40-48GB": 48.0,
    "A10-24GB": 24.0,
    "A10G-24GB": 24.0,
    "T4-16GB": 16.0,
    "V100-16GB": 16.0,
    "V100-32GB": 32.0,
}
# Memory of a model whose product name does not say it; A100 and V100 come in two sizes and must.
_DEFAULT_GB = {
    "H100": 80,
    "H200": 141,
    "A30": 24,
    "L4": 24,
    "L40S": 48,
    "L40": 48,
    "A10": 24,
    "A10G": 24,
    "T4": 16,
}
_MODELS = frozenset(key.split("-")[0] for key in FRAMEBUFFER_GIB)
_MEMORY_TOKEN = re.compile(r"^(\d+)GB$")


def gpu_model(product: str) -> str:
    """Model key ("A100-80GB") of a product or pool name, or "" when the model or its memory is not known.

    The name is normalized (normalize_product) and split on dashes; the model is the first token that
    names a known model, the memory the first "<n>GB" token, else the model's only size. An H100 NVL is
    the 94 GB H100.

    >>> gpu_model("NVIDIA-A100-SXM4-80GB"), gpu_model("NVIDIA H100 NVL"), gpu_model("Tesla-T4-SHARED")
    ('A100-80GB', 'H100-94GB', 'T4-16GB')
    """
    tokens = normalize_product(product).split("-")
    model = next((t for t in tokens if t in _MODELS), "")
    if not model:
        return ""
    memory = next((int(m.group(1)) for t in tokens if (m := _MEMORY_TOKEN.match(t))), None)
    if memory is None:
        memory = 94 if model == "H100" and "NVL" in tokens else _DEFAULT_GB.get(model)
    key = f"{model}-{memory}GB"
    return key if key in FRAMEBUFFER_GIB else ""


def mig_profiles(product: str) -> tuple[MigProfile, ...]:
    """The MIG profiles a product supports, smallest first; () for a product without MIG or unknown."""
    return MIG_PROFILES.get(gpu_model(product), ())


def framebuffer_bytes(product: str) -> float:
    """Nominal framebuffer of one GPU of a product in bytes (GiB as named); NaN when unknown."""
    gib = FRAMEBUFFER_GIB.get(gpu_model(product))
    return math.nan if gib is None else gib * BYTES_PER_GIB


# ----------------------------------------------------------------------------------------------------
# Recommendations


@dataclass(frozen=True, slots=True, kw_only=True)
class RightsizeParams:
    """How much room a fit leaves, how much evidence a recommendation needs, what sharing is offered.

    headroom_ratio: the need is p95 compute and peak framebuffer × (1 + headroom_ratio).
    min_telemetry_ratio / min_allocated_gpu_hours: less evidence than this gives no recommendation.
    time_slice_shares: k of the 1/k time-slice shares offered (each replica gets 1/k of the framebuffer).
    cheaper_product_max_busy_ge: a cheaper product is offered only when the compute need is at most this
    (GE): products differ in speed and gpuwatch does not know by how much, so a switch is only offered
    to workloads using so little of their GPU that a slower one should still do.
    """

    headroom_ratio: float = 0.2
    min_telemetry_ratio: float = 0.5
    min_allocated_gpu_hours: float = 1.0
    time_slice_shares: tuple[int, ...] = (2, 4, 8)
    cheaper_product_max_busy_ge: float = 0.5

    def __post_init__(self) -> None:
        if not self.headroom_ratio >= 0:
            raise ConfigError(f"headroom_ratio must be >= 0, got {self.headroom_ratio}")
        if not 0 <= self.min_telemetry_ratio <= 1:
            raise ConfigError(f"min_telemetry_ratio must be in [0, 1], got {self.min_telemetry_ratio}")
        if not self.min_allocated_gpu_hours >= 0:
            raise ConfigError(f"min_allocated_gpu_hours must be >= 0, got {self.min_allocated_gpu_hours}")
        if any(k < 2 for k in self.time_slice_shares):
            raise ConfigError(f"time_slice_shares must be >= 2, got {self.time_slice_shares}")
        if not self.cheaper_product_max_busy_ge >= 0:
            raise ConfigError(
                f"cheaper_product_max_busy_ge must be >= 0, got {self.cheaper_product_max_busy_ge}"
            )


DEFAULT_PARAMS: Final = RightsizeParams()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    """A target a small workload (≤ 1 GE) could move to, in its pool or another."""

    kind: str
    target: str
    ge: float
    memory_bytes: float
    usd_per_hour: float  # ge × price of the pool it runs in
    max_need_ge: float = math.inf  # offered only up to this compute need
    detail: str = ""  # what the reason says of the target, in parentheses


def recommend(
    workloads: pd.DataFrame,
    *,
    usd_per_gpu_hour: Mapping[str, float],
    window_hours: float,
    params: RightsizeParams = DEFAULT_PARAMS,
) -> pd.DataFrame:
    """RIGHTSIZE_RECOMMENDATIONS: each RIGHTSIZE_WORKLOADS row (same index, same order) with its
    smallest fit and its dollars.

    usd_per_gpu_hour: price per GPU-hour of each pool at the window's end (keys normalized like pools;
    the caller resolves the price book). window_hours: the window's length.

    No recommendation ("unknown", with the first reason of these) when the workload has utilization
    telemetry for fewer than min_telemetry_ratio of its allocated samples, held fewer than
    min_allocated_gpu_hours, has no p95 compute or peak framebuffer, holds no GE, or its pool has no price.

    Otherwise need_compute = p95_busy_ge × (1 + headroom) and need_fb = peak_fb_bytes × (1 + headroom),
    and the candidates, each with a GE and a $/h = GE × price of the pool it runs in, are:
      - gpus: n = max(1, ceil(need_compute), ceil(need_fb / GPU framebuffer)) whole GPUs of the same
        product, when n < gpus (so only for workloads holding more than 1 GE);
    and for a workload holding at most 1 GE (a multi-GPU job is sized in whole GPUs only):
      - mig: every MIG profile of its product with fraction ≥ need_compute and memory ≥ need_fb;
      - time_slice: 1/k of a GPU of its product for k in time_slice_shares, with 1/k ≥ need_compute and
        framebuffer / k ≥ need_fb;
      - product: 1 GPU of every other priced pool whose framebuffer is known and ≥ need_fb and whose
        price per GPU-hour is lower, only when need_compute ≤ cheaper_product_max_busy_ge.
    Fits of the same product need its framebuffer known (gpus, time_slice) or its MIG table (mig).
    The cheapest candidate wins (ties: gpus, mig, time_slice, product; then the smaller GE, memory,
    name); if it is not cheaper than today's gpus × price, the workload is "keep" (target_ge = gpus).
    A product switch may hold more GE than today (1 GPU of the cheaper product), never more dollars.

    monthly_savings_usd = (today's $/h − target's $/h) × held / window_hours × HOURS_PER_MONTH, with held
    = allocated_gpu_hours / gpus (capped at the window): a workload that held its GPUs for a tenth of
    the window saves a tenth of a full month's difference. 0.0 for keep, NaN for unknown.
    """
    RIGHTSIZE_WORKLOADS.check(workloads)
    if not window_hours > 0:
        raise DataError(f"window_hours must be positive, got {window_hours}")
    prices = {normalize_product(pool): float(price) for pool, price in usd_per_gpu_hour.items()}
    headroom = params.headroom_ratio
    gpus = workloads["gpus"].to_numpy(dtype=np.float64)
    hours = workloads["allocated_gpu_hours"].to_numpy(dtype=np.float64)
    p95 = workloads["p95_busy_ge"].to_numpy(dtype=np.float64)
    peak = workloads["peak_fb_bytes"].to_numpy(dtype=np.float64)
    need_ge = p95 * (1.0 + headroom)
    need_fb = peak * (1.0 + headroom)

    codes, pools = pd.factorize(workloads["pool"], use_na_sentinel=False)
    pool_names = ["" if pd.isna(p) else str(p) for p in pools]
    pool_price = np.asarray([prices.get(normalize_product(p), math.nan) for p in pool_names])
    pool_fb = np.asarray([framebuffer_bytes(p) for p in pool_names])
    price = pool_price[codes] if len(pool_names) else np.full(len(codes), math.nan)
    fb = pool_fb[codes] if len(pool_names) else np.full(len(codes), math.nan)

    why_unknown = _unknown_reasons(workloads, pool_names, codes, price, params)
    known = np.asarray([not r for r in why_unknown], dtype=np.bool_)
    current = gpus * price

    n = len(workloads)
    chosen: list[_Candidate | None] = [None] * n
    best = np.full(n, math.inf)
    # Whole GPUs of the same product: only ever fewer for a workload holding more than 1 GE.
    many = known & (gpus > 1.0 + EPSILON_GE) & ~np.isnan(fb)
    with np.errstate(invalid="ignore", divide="ignore"):
        whole = np.maximum.reduce(
            [np.ones(n), np.ceil(need_ge - EPSILON_GE), np.ceil(need_fb / fb - EPSILON_GE)]
        )
    many &= whole < gpus - EPSILON_GE
    for i in np.flatnonzero(many).tolist():
        count = int(whole[i])
        chosen[i] = _Candidate(
            kind="gpus",
            target=_gpus_label(count),
            ge=float(count),
            memory_bytes=count * fb[i],
            usd_per_hour=count * price[i],
            detail=f"{_gib(fb[i])} GiB each, instead of {_ge_label(gpus[i])}",
        )
        best[i] = count * price[i]
    # MIG, time-slice and product for a workload holding at most 1 GE.
    small = known & (gpus <= 1.0 + EPSILON_GE)
    for code, pool in enumerate(pool_names):
        rows = np.flatnonzero(small & (codes == code))
        if not len(rows):
            continue
        candidates = _small_candidates(pool, pool_price[code], prices, params)
        if not candidates:
            continue
        ge = np.asarray([c.ge for c in candidates])
        memory = np.asarray([c.memory_bytes for c in candidates])
        max_need = np.asarray([c.max_need_ge for c in candidates])
        need_c = need_ge[rows, None]
        fits = (
            (need_c <= ge + EPSILON_GE)
            & (need_fb[rows, None] <= memory * (1.0 + EPSILON_GE))
            & (need_c <= max_need + EPSILON_GE)
        )
        first = np.argmax(fits, axis=1)  # candidates are sorted cheapest first
        has_fit: list[bool] = np.any(fits, axis=1).tolist()
        for i, has, k in zip(rows.tolist(), has_fit, first.tolist(), strict=True):
            if has:
                chosen[i] = candidates[k]
                best[i] = candidates[k].usd_per_hour

    cheaper = known & (best < current - EPSILON_USD_PER_HOUR)
    held_ratio = np.minimum(np.divide(hours, gpus * window_hours, out=np.zeros(n), where=gpus > 0), 1.0)
    target_usd_per_hour = np.where(cheaper, best, current)
    savings = np.where(known, (current - target_usd_per_hour) * held_ratio * HOURS_PER_MONTH, math.nan)

    # Each row's words, from Python lists: formatting numpy scalars one by one costs several times more.
    headroom_text = _percent(headroom)
    kind, target, reason = [UNKNOWN] * n, [""] * n, list(why_unknown)
    target_ge = np.where(known, gpus, math.nan)  # keep's; a change's below
    notes = [
        "" if not np.isnan(pool_fb[code]) else f"; the framebuffer of {pool} is unknown"
        for code, pool in enumerate(pool_names)
    ]
    gpus_of, p95_of, peak_of, code_of = gpus.tolist(), p95.tolist(), peak.tolist(), codes.tolist()
    labels = {g: _ge_label(g) for g in set(gpus[known].tolist())}
    changed = cheaper.tolist()
    for i in np.flatnonzero(known).tolist():
        need = f"p95 compute {p95_of[i]:.2f} GPU and peak memory {_gib(peak_of[i], 1)} GiB"
        fit = chosen[i]
        if changed[i] and fit is not None:
            kind[i], target[i], target_ge[i] = fit.kind, fit.target, fit.ge
            reason[i] = f"{need} fit {fit.target} ({fit.detail}) with {headroom_text} headroom"
        else:
            kind[i] = KEEP
            reason[i] = (
                f"{need} with {headroom_text} headroom: {labels[gpus_of[i]]} is already "
                f"the smallest fit{notes[code_of[i]]}"
            )
    out = workloads.assign(
        recommendation_kind=pd.Series(kind, index=workloads.index, dtype="str"),
        recommendation_target=pd.Series(target, index=workloads.index, dtype="str"),
        target_ge=pd.Series(target_ge, index=workloads.index, dtype="float64"),
        monthly_savings_usd=pd.Series(savings, index=workloads.index, dtype="float64"),
        recommendation_reason=pd.Series(reason, index=workloads.index, dtype="str"),
    )
    return RIGHTSIZE_RECOMMENDATIONS.check(out)


def candidate_prices(book: PriceBook, pools: Mapping[str, float], at: datetime) -> dict[str, float]:
    """recommend()'s usd_per_gpu_hour: the fleet's pools at the price their GPU-hours cost at the window's
    end (`pools`: commitments blended in, as the ledger prices them), and every other product of the
    price book at its on-demand price in force `at` (a product the fleet lacks has no commitment)."""
    prices = {product: book.usd_per_gpu_hour(product, at) for product in book.normalized()}
    return prices | {normalize_product(pool): float(price) for pool, price in pools.items()}


def _unknown_reasons(
    workloads: pd.DataFrame,
    pool_names: Sequence[str],
    codes: npt.NDArray[np.intp],
    price: Floats,
    params: RightsizeParams,
) -> list[str]:
    """Per row, why there is no recommendation ("" when there is one): the first failing check."""
    gpus = workloads["gpus"].to_numpy(dtype=np.float64)
    hours = workloads["allocated_gpu_hours"].to_numpy(dtype=np.float64)
    telemetry = workloads["telemetry_ratio"].to_numpy(dtype=np.float64)
    p95_unknown = workloads["p95_busy_ge"].isna().to_numpy()
    peak_unknown = workloads["peak_fb_bytes"].isna().to_numpy()
    # Sums of GE-hours and shares come out a hair off in float arithmetic (1.0 GPU-hour as 0.9999999999):
    # within EPSILON_GE of a threshold is at it. NaN fails every check it meets.
    checks = [
        ~(telemetry >= params.min_telemetry_ratio - EPSILON_GE),
        ~(hours >= params.min_allocated_gpu_hours * (1.0 - EPSILON_GE)),
        p95_unknown & peak_unknown,
        p95_unknown,
        peak_unknown,
        ~(gpus > 0),
        np.isnan(price),
    ]
    failed = np.select(checks, list(range(1, len(checks) + 1)), 0)  # the first failing check; 0: none
    needs_telemetry = _percent(params.min_telemetry_ratio)
    fixed = {
        3: "p95 compute and peak framebuffer memory are unknown",
        4: "p95 compute is unknown",
        5: "peak framebuffer memory is unknown",
        6: "holds no GPUs",
    }
    no_price = [f"no price for pool {pool or '(none)'}" for pool in pool_names]
    telemetry_of, hours_of, code_of = telemetry.tolist(), hours.tolist(), codes.tolist()
    few_hours = f"GPU-hours in the window (needs {params.min_allocated_gpu_hours:g})"
    reasons = [""] * len(failed)
    rows = np.flatnonzero(failed)
    for i, check in zip(rows.tolist(), failed[rows].tolist(), strict=True):
        if check == 1:
            ratio = telemetry_of[i]
            share = "no" if math.isnan(ratio) else f"only {_percent(ratio)} of"
            reasons[i] = f"{share} samples had utilization telemetry (needs {needs_telemetry})"
        elif check == 2:
            reasons[i] = f"held only {hours_of[i]:.2f} {few_hours}"
        else:
            reasons[i] = no_price[code_of[i]] if check == 7 else fixed[check]
    return reasons


def _small_candidates(
    pool: str, price: float, prices: Mapping[str, float], params: RightsizeParams
) -> list[_Candidate]:
    """MIG, time-slice and product targets for a workload of `pool` holding at most 1 GE, cheapest first."""
    candidates = [
        _Candidate(
            kind="mig",
            target=p.name,
            ge=p.fraction,
            memory_bytes=p.memory_bytes,
            usd_per_hour=p.fraction * price,
            detail=f"{p.compute_slices}/{p.gpu_slices} GPU, {_gib(p.memory_bytes)} GiB",
        )
        for p in mig_profiles(pool)
    ]
    fb = framebuffer_bytes(pool)
    if not np.isnan(fb):
        candidates += [
            _Candidate(
                kind="time_slice",
                target=f"1/{k} GPU",
                ge=1.0 / k,
                memory_bytes=fb / k,
                usd_per_hour=price / k,
                detail=f"{_gib(fb / k)} GiB of {_gib(fb)} GiB",
            )
            for k in sorted(set(params.time_slice_shares))
        ]
    own = normalize_product(pool)
    for other, other_price in prices.items():
        other_fb = framebuffer_bytes(other)
        if other == own or np.isnan(other_fb) or not other_price < price:
            continue
        candidates.append(
            _Candidate(
                kind="product",
                target=other,
                ge=1.0,
                memory_bytes=other_fb,
                usd_per_hour=other_price,
                max_need_ge=params.cheaper_product_max_busy_ge,
                detail=(
                    f"1 GPU, {_gib(other_fb)} GiB, ${other_price:.2f} instead of ${price:.2f} per GPU-hour; "
                    f"offered only up to {params.cheaper_product_max_busy_ge:g} GPU of compute "
                    "because products differ in speed"
                ),
            )
        )
    rank = {kind: r for r, kind in enumerate(KINDS)}
    return sorted(
        candidates,
        key=lambda c: (round(c.usd_per_hour, 9), rank[c.kind], c.ge, c.memory_bytes, c.target),
    )


def _gpus_label(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _ge_label(ge: float) -> str:
    """ "1 GPU", "4 GPUs" for whole GPUs, else "0.29 GPU"."""
    whole = round(ge)
    return _gpus_label(whole) if abs(ge - whole) <= EPSILON_GE else f"{ge:.2f} GPU"


def _gib(n_bytes: float, decimals: int | None = None) -> str:
    """Bytes in GiB: "20", "17.6" (one decimal at most), or with a fixed number of decimals."""
    gib = n_bytes / BYTES_PER_GIB
    return f"{gib:.{decimals}f}" if decimals is not None else f"{round(gib, 1):g}"


def _percent(ratio: float) -> str:
    return f"{round(ratio * 100, 1):g}%"


# ----------------------------------------------------------------------------------------------------
# Packing


def packed_gpus(shares_ge: npt.ArrayLike) -> int:
    """Whole GPUs needed to hold these GE shares, by first-fit-decreasing on bins of 1 GE.

    A share of 1 GE or more takes ceil(share) whole GPUs of its own; smaller shares are placed largest
    first, each in the first GPU with room for it (sums within EPSILON_GE of 1 fit: 7 × 1/7 is one GPU).
    NaN and non-positive shares hold nothing. Equal shares are placed in runs, and the first GPU with
    room is found in a max segment tree over the GPUs' free room, so a pool of tens of thousands of
    shares packs in well under a second.
    """
    shares = np.asarray(shares_ge, dtype=np.float64)
    shares = shares[shares > EPSILON_GE]  # drops NaN too
    big = shares >= 1.0 - EPSILON_GE
    gpus = int(np.ceil(shares[big] - EPSILON_GE).sum())
    # Rounded so that float noise (2/7 computed two ways) does not split a run of equal shares.
    sizes, counts = np.unique(np.round(shares[~big], 12), return_counts=True)
    if not len(sizes):
        return gpus
    leaves = 1 << max(0, int(counts.sum() - 1).bit_length())
    room = [1.0] * (2 * leaves)  # node: the most free room among its GPUs; unopened GPUs are empty
    opened = 0
    for size, count in zip(sizes[::-1].tolist(), counts[::-1].tolist(), strict=True):
        left = int(count)
        while left:
            node = 1
            while node < leaves:
                node = 2 * node if room[2 * node] >= size - EPSILON_GE else 2 * node + 1
            placed = min(left, max(1, int((room[node] + EPSILON_GE) // size)))
            left -= placed
            opened = max(opened, node - leaves + 1)
            room[node] -= placed * size
            node //= 2
            while node:
                room[node] = max(room[2 * node], room[2 * node + 1])
                node //= 2
    return gpus + opened


def packing_estimate(recommendations: pd.DataFrame) -> pd.DataFrame:
    """RIGHTSIZE_PACKING per pool (sorted): whole GPUs its workloads need today and with every
    recommendation applied.

    gpus_before packs each workload's current GE share (packed_gpus); gpus_after packs target_ge of the
    gpus / mig / time_slice recommendations in their pool and of product recommendations in the target
    pool, and the current share of keep and unknown workloads. gpus_freed = before − after, negative in
    a pool that receives product switches. An estimate, and a lower bound: it packs GE alone, across the
    pool's nodes, ignoring node boundaries, MIG placement and memory-slice rules, and that a GPU is
    either MIG-partitioned or time-sliced, not both.
    """
    RIGHTSIZE_RECOMMENDATIONS.check(recommendations)
    kind = recommendations["recommendation_kind"].astype("str").to_numpy()
    pool = recommendations["pool"].astype("str").to_numpy()
    target = recommendations["recommendation_target"].astype("str").to_numpy()
    gpus = recommendations["gpus"].to_numpy(dtype=np.float64)
    target_ge = recommendations["target_ge"].to_numpy(dtype=np.float64)
    applied = np.isin(kind, KINDS)
    after_pool = np.where(kind == "product", target, pool)
    after_ge = np.where(applied, target_ge, gpus)
    before = pd.Series(gpus).groupby(pool, sort=True).apply(packed_gpus)
    after = pd.Series(after_ge).groupby(after_pool, sort=True).apply(packed_gpus)
    names = sorted(set(before.index) | set(after.index))
    gpus_before = before.reindex(names, fill_value=0).to_numpy(dtype=np.int64)
    gpus_after = after.reindex(names, fill_value=0).to_numpy(dtype=np.int64)
    out = pd.DataFrame(
        {
            "pool": pd.Series(names, dtype="str"),
            "gpus_before": gpus_before,
            "gpus_after": gpus_after,
            "gpus_freed": gpus_before - gpus_after,
        }
    )
    return RIGHTSIZE_PACKING.check(out)


# ----------------------------------------------------------------------------------------------------
# The workloads of a window, from the marked timeline


def workload_usage(marked: pd.DataFrame, *, step_seconds: float) -> pd.DataFrame:
    """RIGHTSIZE_WORKLOADS of a window: per workload (namespace, pod, team) of IDLE_MARKED rows (with
    fb_used_bytes where known), its pool and GE at its last sample, allocated GE-hours, the 95th
    percentile over its samples of its busy GE (Σ util × GE share over its units with known
    utilization; samples with none are left out), its peak framebuffer (Σ over its units at one
    sample; NaN where never known) and the share of its unit-samples with known utilization."""
    keys = ("namespace", "pod", "team")
    workload, groups = group_codes(marked, keys)
    times, _ = pd.factorize(marked["timestamp"])
    sample, first = np.unique(workload * (int(times.max(initial=0)) + 1) + times, return_index=True)
    row_sample = np.searchsorted(sample, workload * (int(times.max(initial=0)) + 1) + times)
    n = len(sample)
    util = marked["util_ratio"].to_numpy(dtype=np.float64)
    share = marked["ge_share"].to_numpy(dtype=np.float64)
    fb = (
        marked["fb_used_bytes"].to_numpy(dtype=np.float64)
        if "fb_used_bytes" in marked
        else np.full(len(util), np.nan)
    )
    known, fb_known = ~np.isnan(util), ~np.isnan(fb)
    pool_codes, pool_names = pd.factorize(marked["pool"])

    def per_sample(values: Floats, present: npt.NDArray[np.bool_]) -> Floats:
        total = np.bincount(row_sample, weights=np.where(present, values, 0.0), minlength=n)
        return np.where(np.bincount(row_sample, weights=present, minlength=n) > 0, total, np.nan)

    samples = pd.DataFrame(
        {
            "workload": workload[first],
            "time": times[first],
            "busy": per_sample(util * share, known),
            "fb": per_sample(fb, fb_known),
            "ge": np.bincount(row_sample, weights=share, minlength=n),
            "pool": pool_codes[first],
        }
    )
    by = samples.groupby("workload", sort=True)
    last = (
        samples.sort_values(["workload", "time"]).groupby("workload", sort=True).tail(1).set_index("workload")
    )
    n_rows = np.bincount(workload, minlength=len(groups))
    out = groups.astype("str").assign(
        pool=np.asarray(pool_names.astype("str"))[last["pool"].reindex(range(len(groups))).to_numpy()],
        gpus=last["ge"].reindex(range(len(groups))).to_numpy(),
        allocated_gpu_hours=by["ge"].sum().reindex(range(len(groups))).to_numpy() * (step_seconds / 3600.0),
        p95_busy_ge=by["busy"].quantile(0.95).reindex(range(len(groups))).to_numpy(),
        peak_fb_bytes=by["fb"].max().reindex(range(len(groups))).to_numpy(),
        telemetry_ratio=np.bincount(workload, weights=known, minlength=len(groups)) / np.maximum(n_rows, 1),
    )
    numbers = ["gpus", "allocated_gpu_hours", "p95_busy_ge", "peak_fb_bytes", "telemetry_ratio"]
    out = out.astype(dict.fromkeys(numbers, "float64")).sort_values(list(keys), ignore_index=True)
    return RIGHTSIZE_WORKLOADS.check(out[list(RIGHTSIZE_WORKLOADS.columns)])
