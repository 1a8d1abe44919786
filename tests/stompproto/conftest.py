import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

# Modest example counts: the machine is shared (see the project's helper rules).
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The fuzz harness is imported by test_fuzz_harness.py; the helpers live next to the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
