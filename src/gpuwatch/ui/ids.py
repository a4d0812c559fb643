"""Component IDs, prefixed by page, so callbacks and browser tests name the same things."""

# The shell: URL, global filters, refresh tick, the one download sink.
URL = "shell-url"
NAV = "shell-nav"
SOURCE_BADGE = "shell-source"
REFRESH = "shell-refresh"
POLL = "shell-poll"  # a short tick: is a computation under way (or just ended)?
PENDING = "shell-pending"  # bumped by POLL then: pages draw again (an Input of every page's callback)
RENDERED = "page-rendered"  # pattern-matching type: {"type", "page"}: what a page's last drawing lacked
DOWNLOAD = "shell-download"
DOWNLOAD_BUTTON = "shell-download-button"  # pattern-matching type: {"type", "table", "fmt", "arg"}
FILTER_WINDOW = "filter-window"
FILTER_START = "filter-start"
FILTER_END = "filter-end"
FILTER_CUSTOM = "filter-custom"
FILTER_CLUSTER = "filter-cluster"
FILTER_CLUSTER_BOX = "filter-cluster-box"
FILTER_POOL = "filter-pool"
FILTER_PRODUCT = "filter-product"
FILTER_TEAM = "filter-team"
FILTER_NOTE = "filter-note"
NAV_LINK = "shell-nav-link"  # pattern-matching type: {"type", "path"}

OVERVIEW_BANNER = "overview-banner"
OVERVIEW_AS_OF = "overview-as-of"
OVERVIEW_KPIS = "overview-kpis"
OVERVIEW_LEDGER_CHART = "overview-ledger-chart"
OVERVIEW_WATERFALL = "overview-waterfall"
OVERVIEW_POOL_CHART = "overview-pool-chart"
OVERVIEW_TOP_WASTE = "overview-top-waste"

HEALTH_BANNER = "health-banner"
HEALTH_AS_OF = "health-as-of"
HEALTH_METRIC = "health-metric"
HEALTH_HEATMAP = "health-heatmap"
HEALTH_HEATMAP_SHOWN = "health-heatmap-shown"
HEALTH_EVENTS = "health-events"
HEALTH_COVERAGE = "health-coverage"

CAPACITY_BANNER = "capacity-banner"
CAPACITY_AS_OF = "capacity-as-of"
CAPACITY_KPIS = "capacity-kpis"
CAPACITY_HOLES = "capacity-holes"
CAPACITY_HOLES_SHOWN = "capacity-holes-shown"
CAPACITY_FRAGMENTATION = "capacity-fragmentation"
CAPACITY_POOLS = "capacity-pools"
CAPACITY_PENDING = "capacity-pending"

QUEUES_BANNER = "queues-banner"
QUEUES_AS_OF = "queues-as-of"
QUEUES_KPIS = "queues-kpis"
QUEUES_KUEUE_NOTE = "queues-kueue-note"
QUEUES_TABLE = "queues-queues"
QUEUES_CHARTS = "queues-charts"
QUEUES_BORROWING = "queues-borrowing"
QUEUES_BORROWING_SHOWN = "queues-borrowing-shown"
QUEUES_WAITS = "queues-waits"
QUEUES_WAITS_SHOWN = "queues-waits-shown"
QUEUES_TABLES = "queues-tables"

WASTE_BANNER = "waste-banner"
WASTE_AS_OF = "waste-as-of"
WASTE_KPIS = "waste-kpis"
WASTE_LEDGER = "waste-ledger"
WASTE_TREEMAP = "waste-treemap"
WASTE_TABLES = "waste-tables"

TEAMS_BANNER = "teams-banner"
TEAMS_AS_OF = "teams-as-of"
TEAMS_TABLE = "teams-table"

RIGHTSIZE_BANNER = "rightsize-banner"
RIGHTSIZE_AS_OF = "rightsize-as-of"
RIGHTSIZE_KPIS = "rightsize-kpis"
RIGHTSIZE_TABLES = "rightsize-tables"

TEAM_NAME = "team-name"
TEAM_BACK = "team-back"
TEAM_BANNER = "team-banner"
TEAM_AS_OF = "team-as-of"
TEAM_KPIS = "team-kpis"
TEAM_TREND = "team-trend"
TEAM_TABLES = "team-tables"


def table_id(name: str) -> str:
    """The DOM id of a rendered table (`name` is its download name)."""
    return f"table-{name}"
