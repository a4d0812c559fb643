"""Reading and analysing a window: the fleet's sources (live or not) behind FleetService, the raw path's
analysis, the history path's readers of gpuwatch's own series, charges per period and device health."""
