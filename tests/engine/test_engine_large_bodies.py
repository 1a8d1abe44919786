"""Large bodies are paged by size (``Limits.queue_window_bytes``), not only by count, and requeued
messages of a paged queue go back to their original position (issue 17, items 3 and 4). Over the
FakeStore page (memory) and the SegmentStore page (segment files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_engine_paging import Env, Owner

from engine import Consumer, Message
from engine.segment_store import SegmentStore
from engine.testing import FakeStore

MiB = 1024 * 1024


@pytest.fixture(params=["defaults", "segments"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "defaults":
        e = Env(lambda: FakeStore(), window=1000)
    else:
        e = Env(lambda: SegmentStore(tmp_path, recover_window=1000), window=1000)
    e.model.page_window_bytes = 3 * MiB
    yield e
    e.store.close()


def body(i: int) -> bytes:
    return bytes([i]) * MiB


def test_large_bodies_are_paged_by_size_and_come_back_in_order(env: Any) -> None:
    q = env.declare("big", durable=False)
    for i in range(10):
        env.publish("big", body(i), persistent=False)
    assert q.bytes <= 3 * MiB and q.count == 10 and q.paged == 7  # the window holds 3 MiB of bodies
    assert env.model.queued_bytes <= 3 * MiB
    c, log = env.consume(q, prefetch=1)
    got = []
    while len(got) < 10:
        assert log, f"stalled after {len(got)}"
        consumer, tag, b, _ = log.pop(0)
        assert q.bytes <= 3 * MiB  # paged back in a few at a time
        got.append(b)
        env.model.ack(consumer, tag)
        env.sync()
    assert got == [body(i) for i in range(10)]
    assert q.count == 0 and q.paged == 0


def test_one_body_larger_than_the_byte_window_stays_deliverable(env: Any) -> None:
    q = env.declare("huge", durable=False)
    env.publish("huge", b"h" * (4 * MiB), persistent=False)
    env.publish("huge", b"s", persistent=False)
    assert q.paged == 1  # the first stays in memory (a window always holds one)
    holder = Consumer(q, Owner([]), 0, True)
    assert env.model.get(q, holder)[1].msg.body == b"h" * (4 * MiB)
    assert env.model.get(q, holder)[1].msg.body == b"s"


def test_requeue_keeps_original_order_across_the_page_boundary(env: Any) -> None:
    env.model.page_window = 3
    q = env.declare("order", durable=False)
    for i in range(8):
        env.publish("order", b"m%d" % i, persistent=False)
    c, log = env.consume(q, prefetch=5)
    assert [b for _, _, b, _ in log] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    env.model.cancel(c, keep_unacked=True)
    for consumer, tag, _, _ in log:  # rejected one at a time, oldest first
        env.model.nack(consumer, tag, requeue=True)
    env.sync()
    holder = Consumer(q, Owner([]), 0, True)
    got = [env.model.get(q, holder)[1] for _ in range(8)]
    assert [e.msg.body for e in got] == [b"m%d" % i for i in range(8)]
    assert [e.count for e in got] == [1] * 5 + [0] * 3


def test_requeue_in_reverse_and_interleaved_orders() -> None:
    """Whatever order the returns come in, the ready list ends in the original order (FIFO within
    a priority level, higher levels first)."""
    env = Env(lambda: FakeStore(), window=100)
    q = env.declare("mixed", durable=False, **{"x-max-priority": 5})
    prios = [0, 5, 0, 5, 0, 1, 1]
    for i, p in enumerate(prios):
        msg = Message(env.model.next_message_id(), "", "mixed", {}, b"m%d" % i, p)
        env.model.publish(env.vhost, "", msg)
    c, log = env.consume(q)
    delivered = [b for _, _, b, _ in log]
    assert delivered == [b"m1", b"m3", b"m5", b"m6", b"m0", b"m2", b"m4"]
    env.model.cancel(c, keep_unacked=True)
    for consumer, tag, _, _ in [log[i] for i in (3, 0, 6, 2, 5, 1, 4)]:
        env.model.nack(consumer, tag, requeue=True)
    assert [e.msg.body for e in q.ready_entries()] == delivered
