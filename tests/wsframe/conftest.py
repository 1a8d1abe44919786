import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

# modest example counts: the machine is shared; HYPOTHESIS_PROFILE may pick another profile
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# wsframe_helpers.py sits next to the tests
sys.path.insert(0, str(Path(__file__).parent))
