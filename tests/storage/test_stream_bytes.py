"""``StreamLog.end_within_bytes`` on every store (memory/FakeStore, segment files, PostgreSQL): the
end of a read from a start offset whose records fit a byte budget, checked against the records'
sizes summed one by one: within a segment, across segments (the segment files' sparse index and
whole-segment steps), from a start retention removed, never past the committed end, at least one
record."""

from __future__ import annotations

import tempfile

import pytest
import test_stream_contract
from hypothesis import given, settings
from hypothesis import strategies as st
from streamtest_helpers import StreamStores, smsg

from engine.records import _encode_message
from engine.streams import StreamSettings
from engine.streams._segment import INDEX_STRIDE
from engine.streams.memory import RECORD_OVERHEAD

T0 = 1_700_000_000.0
#: the fixture: a store of each kind
stores = test_stream_contract.stores
#: a segment-file record's filter field (``<u32 n>``, n = 0 for unfiltered) beside the common overhead
SEGMENT_FILTER_FIELD = 4


def body(i: int) -> bytes:
    return b"b" * (40 + (i * 37) % 300)  # sizes vary, so the budget's cut moves record by record


def record_size(kind: str, i: int) -> int:
    """What one record of ``fill`` takes in the store (the lookup's unit)."""
    extra = SEGMENT_FILTER_FIELD if kind == "segment" else 0
    return len(_encode_message(smsg(i, body(i)))) + RECORD_OVERHEAD + extra


def fill(log, lo: int, hi: int) -> None:
    for i in range(lo, hi):
        assert log.append(smsg(i, body(i)), T0 + i * 0.001) == i


def expected(kind: str, start: int, budget: int, first: int, end: int) -> int:
    """The reference: add records one by one from ``start`` (raised to ``first``) while they fit."""
    at = max(start, first)
    if at >= end:
        return max(start, end)
    total, x = 0, at
    while x < end and total + record_size(kind, x) <= budget:
        total += record_size(kind, x)
        x += 1
    return max(x, at + 1)


def check_all(stores: StreamStores, log, starts, budgets) -> None:
    end = min(log.committed, log.tail)
    for start in starts:
        for budget in budgets:
            assert log.end_within_bytes(start, budget) == expected(stores.kind, start, budget, log.first, end), \
                (start, budget)


def test_the_budget_cuts_at_the_last_record_that_fits_and_always_takes_one(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    fill(log, 0, 30)
    s.sync(1)
    sizes = [record_size(stores.kind, i) for i in range(30)]
    assert log.end_within_bytes(0, sizes[0]) == 1  # exactly one record's size: that record
    assert log.end_within_bytes(0, sizes[0] + sizes[1] - 1) == 1
    assert log.end_within_bytes(0, sizes[0] + sizes[1]) == 2
    assert log.end_within_bytes(5, 1) == 6  # smaller than any record: still one, so a reader progresses
    assert log.end_within_bytes(0, 10**12) == 30  # never past the end
    assert log.end_within_bytes(30, 1000) == 30 and log.end_within_bytes(45, 1000) == 45  # nothing to read
    check_all(stores, log, range(0, 31, 3), (1, 300, 1000, 2500, 7000))
    for bad in (0, -5, 1.5, "10", True):
        with pytest.raises(ValueError):
            log.end_within_bytes(0, bad)
    s.close()


def test_ranges_crossing_segments_and_index_strides(stores) -> None:
    s = stores.open()
    log = stores.log(s, StreamSettings(segment_bytes=40_000))  # ~190 records a segment: several strides each
    n = 3 * 190 + 50
    fill(log, 0, n)
    s.sync(1)
    assert log.segment_count >= 3
    assert 190 > 2 * INDEX_STRIDE
    starts = [0, 1, 63, 64, 65, 100, 189, 190, 191, 250, 400, n - 1]
    check_all(stores, log, starts, (1, 5_000, 39_000, 40_000, 41_000, 79_999, 120_000, 10**9))
    s = stores.reopen(s)  # segment files: the sealed segments' index comes from their sidecars
    log = stores.log(s, StreamSettings(segment_bytes=40_000))
    check_all(stores, log, starts, (5_000, 41_000, 79_999))
    s.close()


def test_a_start_that_retention_removed_counts_from_the_first_offset_kept(stores) -> None:
    s = stores.open()
    settings = StreamSettings(max_bytes=30_000, segment_bytes=10_000)
    log = stores.log(s, settings)
    fill(log, 0, 300)
    s.sync(1)
    assert log.first > 0
    first = log.first
    check_all(stores, log, (0, first - 1, first, first + 1), (1, 2_000, 12_000, 10**9))
    assert log.end_within_bytes(0, 1) == first + 1
    s.close()


def test_never_past_the_committed_end(stores) -> None:
    s = stores.open()
    log = stores.log(s)
    fill(log, 0, 10)
    s.sync(1)
    fill(log, 10, 20)  # appended, not yet synced
    if log.committed == 10:  # memory with autocommit commits at once: nothing unsynced to check
        assert log.end_within_bytes(0, 10**9) == 10
        assert log.end_within_bytes(10, 10**9) == 10  # the start is the committed end: nothing to read
        assert log.end_within_bytes(3, 10**9, upto=5) == 5
    s.sync(2)
    assert log.end_within_bytes(0, 10**9) == 20
    s.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=150), st.integers(600, 6000), st.data())
def test_any_bodies_segments_starts_and_budgets_match_the_sum(sizes: list[int], segment_bytes: int,
                                                              data: st.DataObject) -> None:
    """Segment files and memory, random record sizes and segment sizes: the lookup equals adding
    the records' sizes one by one (segment files: read from the files' own record framing)."""
    for kind in ("memory", "segment"):
        with tempfile.TemporaryDirectory() as where:
            stores = StreamStores(kind, where)
            s = stores.open()
            log = stores.log(s, StreamSettings(segment_bytes=segment_bytes))
            msgs = [smsg(i, b"z" * n) for i, n in enumerate(sizes)]
            for i, m in enumerate(msgs):
                log.append(m, T0 + i)
            s.sync(1)
            extra = SEGMENT_FILTER_FIELD if kind == "segment" else 0
            cost = [len(_encode_message(m)) + RECORD_OVERHEAD + extra for m in msgs]
            for _ in range(10):
                start = data.draw(st.integers(0, len(msgs)))
                budget = data.draw(st.integers(1, 20_000))
                x, total = start, 0
                while x < len(msgs) and total + cost[x] <= budget:
                    total += cost[x]
                    x += 1
                want = start if start == len(msgs) else max(x, start + 1)
                assert log.end_within_bytes(start, budget) == want, (kind, start, budget)
            s.close()
