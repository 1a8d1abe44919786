"""No per-connection subscription cap, as RabbitMQ: 100,000 STOMP subscriptions on one stomp.py
connection, each to its own queue, and every one of them gets its message (the broker used to
refuse the 10,001st with "Too many subscriptions")."""

from __future__ import annotations

import collections
import os

import pytest
from e2ekit import close_quietly, connect

pytestmark = pytest.mark.timeout(600)

N = 100_000


@pytest.fixture(scope="module")
def kind() -> str:
    return "threads"  # the default server; the cap was the engine's, the same for every kind


def test_hundred_thousand_subscriptions_on_one_connection(server) -> None:
    prefix = f"/queue/many-{os.getpid()}-"
    sub, coll = connect(server.addr)
    pub, pub_coll = connect(server.addr)
    try:
        for i in range(N):
            # pipelined: one receipt at the end says the broker has taken all of them
            sub.subscribe(prefix + str(i), id=str(i), ack="auto",
                          headers={"receipt": "subscribed"} if i == N - 1 else {})
        coll.wait_receipt("subscribed", timeout=300)
        assert coll.errors == []
        for i in range(N):
            pub.send(prefix + str(i), f"m{i}", headers={"receipt": "sent"} if i == N - 1 else {})
        pub_coll.wait_receipt("sent", timeout=300)
        coll.wait_messages(N, timeout=300)
        assert coll.errors == [] and pub_coll.errors == []
        per_sub = collections.Counter(m.headers["subscription"] for m in coll.messages)
        assert len(per_sub) == N and set(per_sub.values()) == {1}
        assert all(m.body == "m" + m.headers["subscription"] for m in coll.messages)
    finally:
        close_quietly(pub)
        close_quietly(sub)
