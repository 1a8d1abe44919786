"""SIGKILL a real server under STOMP load: 20 times over the segment store, 5 times over PostgreSQL
(scripts/crash_test.py runs 1,000, --store postgresql://... for the database)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "crash_test.py"


def load_harness():
    spec = importlib.util.spec_from_file_location("sansmq_crash_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("store", ["segment", "postgres"])
def test_sigkill_under_load_loses_no_receipted_message(tmp_path: Path, store: str, request) -> None:
    harness = load_harness()
    url = request.getfixturevalue("pg_dsn") if store == "postgres" else None
    cycles = 5 if url else 20  # each PostgreSQL cycle also waits for the killed session to go
    counts = harness.run_cycles(cycles, str(tmp_path / "data"), seed=7, log=None, store=url)
    assert counts.violations == []
    assert counts.cycles == cycles
    # the load really ran and the checks had something to check
    assert counts.receipted > 10 * cycles and counts.acked_confirmed > 5 * cycles and counts.recovered > 0
    assert counts.stream_receipted > 10 * cycles and counts.stream_read >= counts.stream_receipted
