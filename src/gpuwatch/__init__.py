"""gpuwatch: GPU fleet monitoring and cost analytics for Kubernetes."""

__version__ = "0.1.0"
