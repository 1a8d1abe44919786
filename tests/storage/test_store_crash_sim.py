"""Deterministic crash consistency on every durable store (``store_factory``): a broker in a
SimNetwork, killed at random points (what was not synced is lost: buffered segment bytes, the
PostgreSQL store's uncommitted batch), reopened; receipted sends are there unless an ack went out,
and messages whose ack was receipted never come back. The segment store runs with 4 KB segments, so
rotation and segment deletion happen under the crashes too."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from storagetest_helpers import connected, kill, new_net, send, split, subscribe

from stompproto import Ack, Receipt

stats: Counter = Counter()

OPS = st.lists(st.sampled_from(["send", "send", "send", "sync", "deliver_ack", "deliver_noack", "crash"]),
               min_size=1, max_size=40)


def die(store) -> None:
    """The broker process dies: nothing it had not synced reaches the disk or the database."""
    if hasattr(store, "_segs"):
        kill(store)
        return
    store._closed = True  # the pending batch is never committed
    store._drop_connection()  # the server ends the session: its advisory lock goes with it


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], max_examples=20)
@given(OPS, st.integers(0, 3))
@example(["send", "send", "sync", "deliver_ack", "crash", "send", "sync", "deliver_noack", "send", "crash"], 0)
def test_random_kills_keep_receipted_and_drop_confirmed_acks(store_factory, ops, seed) -> None:
    stores = store_factory.fresh()
    if stores.kind == "segment":
        stores.kw["segment_size"] = 4096  # rotation and segment deletion under the crashes too
    net = new_net(stores.open(), seed=seed, auto_sync=False)
    receipted: set[bytes] = set()
    ack_sent: set[bytes] = set()
    ack_confirmed: set[bytes] = set()
    n = 0

    def clients():
        p, c = connected(net), connected(net)
        subscribe(c, "/queue/k", "s", ack="client-individual")
        return p, c

    p, c = clients()
    pending = []
    for op in ops:
        if op == "send":
            n += 1
            send(p, "/queue/k", b"m%d" % n + b"." * 200, persistent="true", receipt=f"m{n}")
        elif op == "sync":
            net.complete_syncs()
        elif op.startswith("deliver"):
            net.run_until_idle()
            for m in split(c.events())[0]:
                pending.append(m)
            if pending and op == "deliver_ack":
                m = pending.pop(0)
                key = m.body.split(b".")[0]
                ack_sent.add(key)
                c.send(Ack({"id": m.headers["ack"], "receipt": "a" + key.decode()}))
        elif op == "crash":
            net.run_until_idle()
            die(net.broker.store)
            net = new_net(stores.open(), seed=seed, auto_sync=False)
            p, c = clients()
            pending = []
        net.run_until_idle()
        receipted.update(r.headers["receipt-id"].encode() for r in p.received if isinstance(r, Receipt))
        ack_confirmed.update(r.headers["receipt-id"][1:].encode() for r in c.received if isinstance(r, Receipt))
    # final check: reopen after a kill and drain
    net.run_until_idle()
    die(net.broker.store)
    net = new_net(stores.open(), seed=seed)
    c = connected(net)
    subscribe(c, "/queue/k", "s")
    net.run_until_idle()
    got = [m.body.split(b".")[0] for m in split(c.events())[0]]
    assert len(got) == len(set(got))
    assert not set(got) & ack_confirmed
    assert receipted - ack_sent <= set(got)
    stats[store_factory.kind, "receipted"] += len(receipted)
    stats[store_factory.kind, "crashes"] += ops.count("crash")
    net.broker.store.close()


@pytest.mark.parametrize("kind", ["segment", "postgres"])
def test_the_random_runs_had_something_to_check(kind: str) -> None:
    # runs after the property test in file order: its examples receipted messages and crashed
    assert stats[kind, "receipted"] > 0 and stats[kind, "crashes"] > 0
