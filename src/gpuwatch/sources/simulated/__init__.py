"""The simulated GPU fleet: one deterministic definition behind every source interface gpuwatch reads."""

from gpuwatch.sources.simulated.fleet import SimulatedFleet, build_demo_fleet

__all__ = ["SimulatedFleet", "build_demo_fleet"]
