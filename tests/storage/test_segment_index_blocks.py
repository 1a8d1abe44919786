"""The segment store's per-queue index in packed blocks (engine.storage.segment._blocks/_packed):
exact round trips, the same answers as a plain dict under any order of operations, and a backlog
that costs well under a byte per queued message, also after a restart."""

from __future__ import annotations

import gc
import tracemalloc
from array import array
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from storagetest_helpers import msg

import engine.storage.segment._index as index_mod
from engine.segment_store import SegmentStore
from engine.storage.segment import _packed
from engine.storage.segment._blocks import BLOCK, WARM
from engine.store import QueueDef

U64 = st.integers(0, (1 << 64) - 1)


@given(st.integers(1, 300).flatmap(lambda n: st.lists(st.lists(U64, min_size=n, max_size=n), min_size=1, max_size=3)))
def test_pack_round_trips_any_u64_columns(cols: list[list[int]]) -> None:
    arrays = [array("Q", c) for c in cols]
    assert _packed.unpack(_packed.pack(*arrays), len(cols[0]), len(cols)) == arrays


def test_consecutive_ids_and_equal_records_pack_to_almost_nothing() -> None:
    ids = array("Q", range(10**6, 10**6 + BLOCK))
    pos = array("Q", ((7 << 32) | (16 + 150 * i) for i in range(BLOCK)))
    assert len(_packed.pack(ids, pos)) < BLOCK // 16  # 16 B per entry unpacked


OPS = st.lists(st.tuples(st.sampled_from("aaaapgo"), st.integers(0, 400)), max_size=400)


@settings(max_examples=150)
@given(OPS)
def test_index_answers_like_a_dict_under_any_operations(ops: list[tuple[str, int]]) -> None:
    """Blocks of 8: operations cross blocks, pack and unpack them; out-of-order adds ('o') and
    removals anywhere keep the answers a dict gives, and a queue never keeps more than WARM
    sealed blocks unpacked."""
    orig = index_mod.BLOCK
    index_mod.BLOCK = 8
    try:
        qi = index_mod._QIndex(1)
        model: dict[int, int] = {}
        next_id = 1
        for op, x in ops:
            if op == "a":  # enqueue order: the next id
                pos = (1 + next_id // 50) << 32 | next_id  # a new segment every 50 messages
                qi.add(next_id, pos)
                model[next_id] = pos
                next_id += 1
            elif op == "o":  # an id below the last (not expected, but kept sorted)
                mid = 1 + x % max(1, next_id - 1)
                if mid < next_id and mid not in model:
                    qi.add(mid, 5 << 32 | mid)
                    model[mid] = 5 << 32 | mid
            elif op == "p":
                assert qi.pop(x) == model.pop(x, 0)
            else:
                assert qi.get(x) == model.get(x, 0) and (x in qi) == (x in model)
            assert qi.live == len(model)
            assert sum(1 for b in qi.blocks or () if b.sealed and b.ids is not None) <= WARM
        assert list(qi.entries()) == sorted(model.items())
        assert sorted(qi.positions()) == sorted(model.values())
        assert qi.segment_counts() == Counter(p >> 32 for p in model.values())
        assert qi.last_live() == max(model, default=0)
        if not model:
            assert qi.blocks is None
    finally:
        index_mod.BLOCK = orig


def test_a_queue_emptying_its_open_block_never_unpacks_the_packed_ones(monkeypatch) -> None:
    """Old entries left in a packed block while messages come and go one at a time (every ack
    empties the open block): no add or ack unpacks the old block."""
    unpacks = []
    real = _packed.unpack
    monkeypatch.setattr(_packed, "unpack", lambda *a: unpacks.append(a) or real(*a))
    qi = index_mod._QIndex(1)
    for i in range(1, BLOCK + 1):
        qi.add(i, 1 << 32 | i)
    for mid in range(BLOCK + 1, BLOCK + 1001):  # the first add seals the full block: packed
        qi.add(mid, 2 << 32 | mid)
        assert qi.pop(mid) == 2 << 32 | mid
    assert qi.blocks is not None and qi.blocks[0].ids is None and qi.live == BLOCK
    assert not unpacks
    assert qi.pop(7) == 1 << 32 | 7 and len(unpacks) == 1  # an ack in it: unpacked (and kept)


def _traced(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        keep = fn()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del keep
    return grown


def test_a_queued_backlog_costs_under_a_byte_per_message_before_and_after_a_restart(tmp_path: Path) -> None:
    """200,000 queued persistent messages: the index was 16 B per message as two arrays; in packed
    blocks (consecutive ids, equal-sized records) it is a fraction of a byte, and it is the same after
    recovery rebuilds it; the backlog then drains in order, block by block."""
    n = 200_000
    s = SegmentStore(tmp_path, sync=False)
    s.add_queue(QueueDef("/", "q"))
    body = b"x" * 100

    def fill() -> None:
        for i in range(1, n + 1):
            s.enqueue("/", "q", msg(i, body))
            if i % 10_000 == 0:
                s.sync(i)

    grown = _traced(fill)
    assert grown / n < 1.0, f"{grown / n:.2f} B per queued message"
    s.close()

    s2: SegmentStore | None = None

    def reopen() -> SegmentStore:
        nonlocal s2
        s2 = SegmentStore(tmp_path, sync=False, recover_window=100)
        return s2

    grown = _traced(reopen)
    assert s2 is not None
    rec = s2.recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == list(range(1, 101))
    assert rec.paged[("/", "q")] == n - 100
    assert grown / n < 1.0, f"{grown / n:.2f} B per recovered message"
    qi = s2._qget("/", "q")
    assert qi is not None and qi.blocks is not None and not qi.warm  # nothing read yet: all packed but the open block
    for i in range(1, n + 1):  # acks in order: each block unpacked once, dropped when emptied
        s2.remove("/", "q", i)
        assert len(qi.warm or ()) <= WARM
    assert qi.live == 0 and qi.blocks is None
    s2.close()
    s3 = SegmentStore(tmp_path)
    assert s3.recover().messages.get(("/", "q")) is None
    s3.close()
