"""`gpuwatch export`: the joined fleet as Prometheus series, so Prometheus keeps gpuwatch's history."""

from gpuwatch.surfaces.exporter.collector import (
    PUBLISHED_FIELD_SECONDS,
    ExportLoop,
    GpuwatchCollector,
    serve_exporter,
)

__all__ = ["PUBLISHED_FIELD_SECONDS", "ExportLoop", "GpuwatchCollector", "serve_exporter"]
