"""`gpuwatch export`: the joined fleet as Prometheus series, so Prometheus keeps gpuwatch's history."""

from gpuwatch.exporter.collector import ExportLoop, GpuwatchCollector, serve_exporter

__all__ = ["ExportLoop", "GpuwatchCollector", "serve_exporter"]
