"""The deterministic simulator: one seed drives the workload, the clock and the faults of a whole
broker on a simulated disk (``engine.simfs``); invariants are checked after every step, and a
failing step list shrinks. ``SimWorld`` is the machine, ``run_seed`` one seeded run, ``shrink`` the
delta debugging, ``engine.sim.cli`` the ``sansmq simulate`` command."""

from .oracle import Oracle, Violation
from .run import FAULTS, Result, generate, run_seed, run_steps, shrink
from .world import SimWorld, segment_store

__all__ = ["FAULTS", "Oracle", "Result", "SimWorld", "Violation", "generate", "run_seed", "run_steps",
           "segment_store", "shrink"]
