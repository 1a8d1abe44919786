"""SIGKILL a real server under STOMP load 20 times (scripts/crash_test.py runs 1,000)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "crash_test.py"


def load_harness():
    spec = importlib.util.spec_from_file_location("sansmq_crash_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_sigkill_under_load_loses_no_receipted_message(tmp_path: Path) -> None:
    harness = load_harness()
    counts = harness.run_cycles(20, str(tmp_path / "data"), seed=7, log=None)
    assert counts.violations == []
    assert counts.cycles == 20
    # the load really ran and the checks had something to check
    assert counts.receipted > 200 and counts.acked_confirmed > 100 and counts.recovered > 0
