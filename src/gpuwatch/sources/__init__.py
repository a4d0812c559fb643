"""Adapters to the real systems gpuwatch reads — Prometheus (or a compatible store), the Kubernetes API and
Kueue — turning what they hold into model objects and frames; the simulator lives in gpuwatch.sim."""
