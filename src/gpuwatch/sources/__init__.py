"""The outside world (Prometheus, the Kubernetes API, the simulated fleet) turned into model objects."""
