"""The simulated GPU fleet: one deterministic definition behind every source interface gpuwatch reads."""

from gpuwatch.sources.simulated.demo import build_demo_fleet
from gpuwatch.sources.simulated.fleet import SimulatedFleet

__all__ = ["SimulatedFleet", "build_demo_fleet"]
