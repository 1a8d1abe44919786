"""The ``Store`` contract, checked on every durable store (``store_factory``: segment files and
PostgreSQL): entities and messages round-trip through a reopen, deletes cascade, a message shared by
queues is one object, a second owner is refused, ``sync`` on a worker thread covers what the loop
appended before it while the loop keeps appending. (File-format details of the segment store:
test_segment_store.py; PostgreSQL specifics: test_postgres_store.py.)"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storagetest_helpers import apply_op, msg

from engine._message import Message
from engine.store import BindingDef, ExchangeDef, QueueDef, StoreError


def reopen(store, stores, **kw):
    store.close()
    return stores.open(**kw)


def queue_ids(rec, vhost: str = "/", name: str = "q") -> list[int]:
    return [sm.message.id for sm in rec.messages.get((vhost, name), [])]


def test_entities_round_trip_and_deletes_cascade(store_factory) -> None:
    s = store_factory.open()
    s.add_vhost("v")
    s.add_vhost("w")
    s.delete_vhost("w")
    s.add_exchange(ExchangeDef("v", "x", "topic", args={"alternate-exchange": "y"}))
    s.add_exchange(ExchangeDef("v", "gone", "fanout"))
    s.add_exchange(ExchangeDef("v", "e2e", "direct", auto_delete=True, internal=True))
    s.add_queue(QueueDef("v", "q", args={"x-max-length": 3, "x-queue-mode": "lazy"}))
    s.add_queue(QueueDef("v", "r"))
    s.add_binding(BindingDef("v", "x", "q", False, "a.*"))
    s.add_binding(BindingDef("v", "x", "q", False, "a.*", {"x-match": "all"}))  # same key, other args
    s.add_binding(BindingDef("v", "x", "r", False, "b"))
    s.add_binding(BindingDef("v", "gone", "q", False, ""))
    s.add_binding(BindingDef("v", "x", "e2e", True, "c"))
    s.delete_binding(BindingDef("v", "x", "e2e", True, "c"))
    s.delete_exchange("v", "gone")
    s.delete_queue("v", "r")
    s.sync(1)
    rec = reopen(s, store_factory).recover()
    assert rec.vhosts == ["v"]
    assert [(x.name, x.type, x.auto_delete, x.internal, x.args) for x in rec.exchanges] == [
        ("x", "topic", False, False, {"alternate-exchange": "y"}), ("e2e", "direct", True, True, None)]
    assert [(q.name, q.args) for q in rec.queues] == [("q", {"x-max-length": 3, "x-queue-mode": "lazy"})]
    assert [(b.source, b.dest, b.key, b.args) for b in rec.bindings] == [
        ("x", "q", "a.*", None), ("x", "q", "a.*", {"x-match": "all"})]


def test_message_fields_and_shared_records(store_factory) -> None:
    s = store_factory.open()
    s.add_queue(QueueDef("/", "q"))
    s.add_queue(QueueDef("/", "r"))
    m = Message(7, "amq.topic", "k.é", {"a": 1, "b": [1, "x"]}, b"\x00" * 1000, 5, 1.5e9, True, 30.0)
    s.enqueue("/", "q", m)
    s.enqueue("/", "r", m)  # one message, two queues
    s.update_delivery("/", "q", 7, 3)
    s.sync(1)
    rec = reopen(s, store_factory).recover()
    (sq,), (sr,) = rec.messages[("/", "q")], rec.messages[("/", "r")]
    assert sq.message is sr.message
    got = sq.message
    assert (got.id, got.exchange, got.routing_key, got.headers, got.body, got.priority, got.expires_at,
            got.persistent, got.ack_timeout) == (7, "amq.topic", "k.é", {"a": 1, "b": [1, "x"]},
                                                  b"\x00" * 1000, 5, 1.5e9, True, 30.0)
    assert (sq.delivery_count, sr.delivery_count) == (3, 0)


def test_removal_from_one_queue_keeps_the_message_in_the_other(store_factory) -> None:
    s = store_factory.open()
    s.add_queue(QueueDef("/", "q"))
    s.add_queue(QueueDef("/", "r"))
    for i in (1, 2, 3):
        s.enqueue("/", "q", msg(i))
        s.enqueue("/", "r", msg(i))
    s.sync(1)
    s.remove("/", "q", 2)
    s.remove("/", "r", 3)
    s.enqueue("/", "q", msg(4))
    s.remove("/", "q", 4)  # in and out before any sync
    s.update_delivery("/", "r", 1, 2)
    s.update_delivery("/", "r", 1, 5)
    s.sync(2)
    rec = reopen(s, store_factory).recover()
    assert queue_ids(rec, name="q") == [1, 3] and queue_ids(rec, name="r") == [1, 2]
    assert [sm.delivery_count for sm in rec.messages[("/", "r")]] == [5, 0]
    assert [sm.message.body for sm in rec.messages[("/", "q")]] == [b"body-1", b"body-3"]


def test_deleted_or_redeclared_queue_forgets_its_messages(store_factory) -> None:
    s = store_factory.open()
    s.add_queue(QueueDef("/", "q"))
    s.add_queue(QueueDef("/", "gone"))
    s.add_binding(BindingDef("/", "amq.direct", "gone", False, "k"))
    for i in (1, 2):
        s.enqueue("/", "q", msg(i))
        s.enqueue("/", "gone", msg(i))
    s.sync(1)
    s.delete_queue("/", "gone")
    s.add_queue(QueueDef("/", "q", args={"x-max-priority": 5}))  # replaces q: empty again
    s.enqueue("/", "q", msg(3))
    s.sync(2)
    rec = reopen(s, store_factory).recover()
    assert [(q.name, q.args) for q in rec.queues] == [("q", {"x-max-priority": 5})]
    assert rec.bindings == [] and queue_ids(rec) == [3]
    assert ("/", "gone") not in rec.messages


def test_close_commits_what_is_pending_and_unknown_queues_are_ignored(store_factory) -> None:
    s = store_factory.open()
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1))
    s.enqueue("/", "transient-queue", msg(2))  # not a durable queue the store knows: ignored
    s.remove("/", "nowhere", 2)
    rec = reopen(s, store_factory).recover()
    assert queue_ids(rec) == [1] and [q.name for q in rec.queues] == ["q"]


def test_a_second_owner_is_refused(store_factory) -> None:
    s = store_factory.open()
    with pytest.raises(StoreError, match="in use"):
        store_factory.open(**({"lock_wait": 0.2} if store_factory.kind == "postgres" else {}))
    s.close()
    store_factory.open().close()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], max_examples=25)
@given(st.lists(st.tuples(st.sampled_from("erc"), st.integers(1, 30), st.integers(0, 5), st.booleans()),
                max_size=40))
def test_replay_matches_a_model(store_factory, ops) -> None:
    """Random enqueue/remove/count sequences, synced at random points: the reopened store equals a
    dict model."""
    stores = store_factory.fresh()
    s = stores.open()
    s.add_queue(QueueDef("/", "q"))
    model: dict[int, int] = {}
    next_id = 0
    for op, k, count, sync in ops:
        next_id = apply_op(s, model, op, k, count, next_id)
        if sync:
            s.sync(1)
    s.sync(2)
    rec = reopen(s, stores).recover()
    assert {sm.message.id: sm.delivery_count for sm in rec.messages.get(("/", "q"), [])} == model
    assert [sm.message.id for sm in rec.messages.get(("/", "q"), [])] == sorted(model)


def test_sync_from_a_worker_thread_while_the_loop_appends(store_factory) -> None:
    """A thread syncs in a loop while this one enqueues and removes: the final state matches, and
    what a sync covered is there even when later appends are lost (the store is not closed)."""
    s = store_factory.open()
    s.add_queue(QueueDef("/", "q"))
    stop = threading.Event()
    errors: list[BaseException] = []
    rounds = [0]

    def syncer() -> None:
        try:
            while not stop.is_set():
                s.sync(0)
                rounds[0] += 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    t = threading.Thread(target=syncer)
    t.start()
    live = []
    for i in range(1, 3001):
        s.enqueue("/", "q", msg(i, b"%d" % i * 20))
        live.append(i)
        if i % 3 == 0:
            s.remove("/", "q", live.pop(0))
        if i % 200 == 0:
            time.sleep(0.005)  # let syncs interleave with the appends (a database commit is slow)
    stop.set()
    t.join()
    assert not errors and rounds[0] > 1
    rec = reopen(s, store_factory).recover()
    got = rec.messages[("/", "q")]
    assert [sm.message.id for sm in got] == live
    assert all(sm.message.body == b"%d" % sm.message.id * 20 for sm in got)
