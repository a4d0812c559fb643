"""One exception tree for gpuwatch; every message is a single line meant for a person."""


class GpuwatchError(Exception):
    """Base of every error gpuwatch raises on purpose."""


class ConfigError(GpuwatchError):
    """Bad flags, environment or config file (CLI exit code 2)."""


class DataError(GpuwatchError):
    """Input data that cannot be used (a malformed trace, quantity or sample)."""


class SourceError(GpuwatchError):
    """An outside system failed (CLI exit code 3)."""


class PrometheusError(SourceError):
    """Prometheus (or a compatible engine) is unreachable or answered with an error."""


class KubernetesError(SourceError):
    """The Kubernetes API server is unreachable or refused a request."""
