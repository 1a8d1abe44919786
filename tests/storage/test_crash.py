"""SIGKILL a real server under STOMP load: 20 times over the segment store, 5 times over PostgreSQL,
3 times followed by a power cut of each kind (scripts/crash_test.py runs 1,000, --store
postgresql://... for the database, --power-cut drop|torn for the cut)."""

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


@pytest.mark.parametrize("mode", ["drop", "torn"])
def test_power_cut_after_sigkill_loses_no_receipted_message(tmp_path: Path, mode: str) -> None:
    """crash_test.py --power-cut: after each kill the writes no fsync covered are undone (torn:
    one of them kept in part) on the real files, and the same checks hold."""
    harness = load_harness()
    counts = harness.run_cycles(3, str(tmp_path / "data"), seed=11, log=None, power_cut=mode)
    assert counts.violations == []
    assert counts.cycles == 3 and counts.receipted > 30 and counts.stream_receipted > 30
    assert counts.cut_files > 0 and counts.cut_undone + counts.cut_torn > 0  # the cut really undid writes
    assert not (tmp_path / "data.cut-log").exists()  # applied and removed after each kill


def test_the_stream_check_finds_what_it_is_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's stream check itself: a read from past the overlap, a gap, a changed old offset,
    a duplicate and a lost receipted append are each a violation; a clean read is none."""
    harness = load_harness()
    monkeypatch.setattr(harness, "STREAM_OVERLAP", 2)
    reads: list[list[tuple[int, bytes]]] = []
    starts: list[int] = []

    def fake_read(addr, start=0, at_least=0):
        starts.append(start)
        return [(o, b) for o, b in reads.pop(0) if o >= start]

    monkeypatch.setattr(harness, "read_stream", fake_read)
    check, counts = harness.StreamCheck(), harness.Counts()

    def run(read: list[bytes], receipted: set[bytes], full: bool = False) -> list[str]:
        reads.append(list(enumerate(read)))
        counts.violations.clear()
        check.check(1, ("127.0.0.1", 1), receipted, counts, full)
        return list(counts.violations)

    assert run([b"a", b"b", b"c"], {b"a", b"c"}) == []
    assert run([b"a", b"b", b"c", b"d"], {b"a", b"c", b"d"}) == [] and starts[-1] == 1  # from overlap
    assert run([b"a", b"b", b"c", b"d"], {b"e"}) == ["cycle 1: receipted stream append b'e' lost"]
    assert "offset 0 changed" in run([b"x", b"b", b"c", b"d"], set(), full=True)[0]
    assert "appears twice" in run([b"a", b"b", b"c", b"d", b"a"], set())[0]
    reads.append([(3, b"d"), (5, b"f")])
    counts.violations.clear()
    check.check(2, ("127.0.0.1", 1), set(), counts, False)
    assert "not contiguous" in counts.violations[0]
