"""Component IDs, prefixed by page, so callbacks and browser tests name the same things."""

OVERVIEW_KPIS = "overview-kpis"
OVERVIEW_POOL_CHART = "overview-pool-chart"
OVERVIEW_INTERVAL = "overview-interval"
OVERVIEW_AS_OF = "overview-as-of"
