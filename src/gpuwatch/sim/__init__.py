"""The simulated GPU fleet: one deterministic definition behind every source interface gpuwatch reads."""

from gpuwatch.sim.demo import build_demo_fleet
from gpuwatch.sim.fleet import SimulatedFleet

__all__ = ["SimulatedFleet", "build_demo_fleet"]
