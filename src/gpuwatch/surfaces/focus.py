"""FOCUS 1.2 Cost and Usage rows (the FinOps Open Cost and Usage Specification) from the window's charges."""

import io
import json
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from gpuwatch.analytics.charges import ENERGY, FLEET_STATES
from gpuwatch.core.config import FocusSettings
from gpuwatch.core.model import Window
from gpuwatch.core.schema import CHARGES

FOCUS_VERSION = "1.2"
PERIODS = {"hour": 3600, "day": 86_400}
GPU_HOURS_UNIT = "GPU-Hours"
ENERGY_UNIT = "kWh"
TAG_PREFIX = "gpuwatch/"
DEFAULT_CLUSTER = "default"  # SubAccountId of a fleet of one cluster gpuwatch was given no name for

# The columns in the order the file carries them: FOCUS 1.2's mandatory Cost and Usage columns, and the
# conditional ones whose condition gpuwatch meets (usage measured, unit and list prices, sub accounts
# (clusters), resources, SKUs (products), tags).
COLUMNS = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
)


def focus_rows(
    charges: pd.DataFrame, *, window: Window, names: FocusSettings
) -> tuple[pd.DataFrame, list[str]]:
    """The FOCUS rows of CHARGES over `window` (charge periods clipped to it), and warnings: energy rows
    whose kWh or price is unknown are left out (FOCUS has no unknown cost) and counted.

    Per row: PricingQuantity = ConsumedQuantity = GPU-hours (kWh for energy); EffectiveCost as the report
    prices it (the price in force, commitments blended), ContractedCost the same and BilledCost too (what
    the team is charged back) unless the provider and the invoice issuer differ; ListCost at the on-demand
    price in force; the unit prices are the costs per unit of the row (a price that changed within a
    period is its hours' mean)."""
    CHARGES.check(charges)
    warnings = []
    energy = charges["state"] == ENERGY
    unknown = energy & (charges["gpu_hours"].isna() | charges["effective_usd"].isna())
    if unknown.any():
        warnings.append(
            f"{int(unknown.sum())} energy charges of unknown kWh or price left out of the FOCUS rows"
        )
    rows = charges[~unknown].reset_index(drop=True)
    start = rows["period_start"].where(rows["period_start"] > window.start, pd.Timestamp(window.start))
    end = rows["period_end"].where(rows["period_end"] < window.end, pd.Timestamp(window.end))
    month = start.dt.tz_localize(None).dt.to_period("M")
    billing_start = month.dt.start_time.dt.tz_localize("UTC")
    billing_end = (month + 1).dt.start_time.dt.tz_localize("UTC")
    fleet = rows["state"].isin(FLEET_STATES).to_numpy()
    is_energy = (rows["state"] == ENERGY).to_numpy()
    cluster = rows["cluster"].where(rows["cluster"] != "", DEFAULT_CLUSTER)
    workload = cluster + "/" + rows["namespace"] + "/" + rows["pod"]
    unheld = (rows["pod"] == "").to_numpy()
    resource_id = np.where(fleet | unheld, cluster + "/" + rows["pool"], workload)
    quantity = rows["gpu_hours"].to_numpy(dtype=np.float64)
    effective = rows["effective_usd"].to_numpy(dtype=np.float64)
    listed = rows["list_usd"].to_numpy(dtype=np.float64)
    per_unit = np.divide(1.0, quantity, out=np.zeros_like(quantity), where=quantity > 0)
    unit = np.where(is_energy, ENERGY_UNIT, GPU_HOURS_UNIT)
    out = pd.DataFrame(
        {
            # FOCUS: a charge whose payment a third party receives bills nothing.
            "BilledCost": effective if names.provider_name == names.invoice_issuer_name else 0.0,
            "BillingAccountId": names.billing_account_id,
            "BillingAccountName": names.billing_account_name,
            "BillingCurrency": "USD",
            "BillingPeriodEnd": billing_end,
            "BillingPeriodStart": billing_start,
            "ChargeCategory": "Usage",
            "ChargeClass": None,
            "ChargeDescription": _descriptions(rows, is_energy),
            "ChargeFrequency": "Usage-Based",
            "ChargePeriodEnd": end,
            "ChargePeriodStart": start,
            "ConsumedQuantity": quantity,
            "ConsumedUnit": unit,
            "ContractedCost": effective,
            "ContractedUnitPrice": effective * per_unit,
            "EffectiveCost": effective,
            "InvoiceId": None,  # charged back, never invoiced: FOCUS wants no invoice named
            "InvoiceIssuerName": names.invoice_issuer_name,
            "ListCost": listed,
            "ListUnitPrice": listed * per_unit,
            "PricingQuantity": quantity,
            "PricingUnit": unit,
            "ProviderName": names.provider_name,
            "PublisherName": names.publisher_name,
            "ResourceId": resource_id,
            "ResourceName": np.where(fleet | unheld, rows["pool"], rows["pod"]),
            "ResourceType": np.where(fleet | unheld, "GPU pool", "Pod"),
            "ServiceCategory": "Compute",
            "ServiceName": "Kubernetes GPUs",
            "ServiceSubcategory": "Containers",
            "SkuId": np.where(is_energy, "energy/" + rows["pool"], rows["pool"]),
            "SubAccountId": cluster,
            "SubAccountName": cluster,
            "Tags": _tags(rows, cluster),
        },
        columns=list(COLUMNS),
    )
    return out, warnings


def tagged(charges: pd.DataFrame, only: Mapping[str, str]) -> pd.DataFrame:
    """The charges whose rows carry each of `only`'s tags (keys: team, pool, cluster; a fleet of one unnamed
    cluster is tagged DEFAULT_CLUSTER)."""
    keep = np.ones(len(charges), dtype=bool)
    for key, value in only.items():
        column = charges[key]
        if key == "cluster":
            column = column.where(column != "", DEFAULT_CLUSTER)
        keep &= (column == value).to_numpy()
    return charges[keep]


def _descriptions(
    rows: pd.DataFrame, is_energy: "np.ndarray[tuple[int], np.dtype[np.bool_]]"
) -> "pd.Series[str]":
    held = rows["namespace"] + "/" + rows["pod"]
    gpu = "GPU-hours " + rows["state"].str.replace("_", " ") + " on " + rows["pool"]
    gpu = gpu.where(rows["pod"] == "", gpu + " held by " + held)
    power = "Energy of " + rows["pool"] + " GPUs"
    power = power.where(rows["pod"] == "", power + " held by " + held)
    return power.where(pd.Series(is_energy, index=rows.index), gpu)


def _tags(rows: pd.DataFrame, cluster: "pd.Series[str]") -> list[str]:
    keys = ("team", "namespace", "workload", "pool", "cluster", "state")
    columns: Sequence[pd.Series[str]] = (
        rows["team"],
        rows["namespace"],
        rows["pod"],
        rows["pool"],
        cluster,
        rows["state"].where(rows["state"] != ENERGY, ""),  # energy is no ledger state
    )
    out = []
    for values in zip(*columns, strict=True):
        tags = {TAG_PREFIX + k: v for k, v in zip(keys, values, strict=True) if v != ""}
        out.append(json.dumps(tags, separators=(",", ":"), sort_keys=True))
    return out


def render_focus(rows: pd.DataFrame, fmt: str) -> bytes:
    """The rows as CSV (ISO 8601 UTC times, "Z") or Parquet."""
    times = ["BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"]
    if fmt == "parquet":
        buffer = io.BytesIO()
        rows.to_parquet(buffer, index=False)
        return buffer.getvalue()
    text = rows.assign(**{c: rows[c].dt.strftime("%Y-%m-%dT%H:%M:%SZ") for c in times})
    return text.to_csv(index=False, float_format="%.10g").encode()
