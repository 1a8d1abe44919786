"""Policies and administration on a running broker with real clients, on every server kind: a policy
trims an existing queue at once, combines with queue arguments as RabbitMQ does, dead-letters;
deleting a vhost or a user closes their connections (320). Administration runs on the server's loop
thread (``Running.admin``), as the management API's does."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
from e2ekit import uid, wait_until

import servers
from engine import Config
from engine.model.policies import Policy

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def srv(kind: str) -> Iterator[servers.Running]:
    with servers.running(kind, [("amqp", "127.0.0.1", 0)], config=Config()) as running:
        yield running


def connect(srv: servers.Running, vhost: str = "/", user: str = "guest", password: str = "guest"):
    host, port = srv.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, vhost, pika.PlainCredentials(user, password),
                                                             connection_attempts=1, socket_timeout=10))


def publish(ch, queue: str, n: int) -> None:
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, b"m%d" % i)


def count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def test_a_max_length_policy_trims_an_existing_queue_at_once(srv):
    conn = connect(srv)
    ch = conn.channel()
    q = uid("pol-trim")
    ch.queue_declare(q, auto_delete=False)
    publish(ch, q, 10)
    assert count(ch, q) == 10
    srv.admin(lambda b: b.set_policy(Policy("/", q, f"^{q}$", {"max-length": 3}, apply_to="queues")))
    assert count(ch, q) == 3
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(3)] == [b"m7", b"m8", b"m9"]
    policy = srv.admin(lambda b: b.model.vhosts["/"].queues[q].policy)
    assert policy == q
    srv.admin(lambda b: b.delete_policy("/", q))
    publish(ch, q, 5)
    assert count(ch, q) == 5  # no policy, no limit
    ch.queue_delete(q)
    conn.close()


def test_the_lower_limit_wins_and_the_queue_argument_wins_for_the_rest(srv):
    conn = connect(srv)
    ch = conn.channel()
    q, dead, mine = uid("pol-mix"), uid("pol-dead"), uid("pol-mine")
    ch.queue_declare(dead)
    ch.queue_declare(mine)
    ch.queue_declare(q, arguments={"x-max-length": 2, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": mine})
    srv.admin(lambda b: b.set_policy(Policy("/", q, f"^{q}$", {"max-length": 5, "dead-letter-exchange": "",
                                                              "dead-letter-routing-key": dead})))
    publish(ch, q, 4)
    assert count(ch, q) == 2  # min(2, 5)
    wait_until(lambda: count(ch, mine) == 2, what="two dropped heads dead-lettered to the queue's own DLX")
    assert count(ch, dead) == 0
    ch.queue_declare(q, arguments={"x-max-length": 2, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": mine})  # still equivalent: the policy is not an argument
    for name in (q, dead, mine):
        ch.queue_delete(name)
    srv.admin(lambda b: b.delete_policy("/", q))
    conn.close()


def test_a_dead_letter_policy_catches_rejected_messages(srv):
    conn = connect(srv)
    ch = conn.channel()
    q, dead = uid("pol-dlx"), uid("pol-dlx-dead")
    ch.queue_declare(dead)
    ch.queue_declare(q)
    srv.admin(lambda b: b.set_policy(Policy("/", q, f"^{q}$", {"dead-letter-exchange": "",
                                                              "dead-letter-routing-key": dead})))
    publish(ch, q, 1)
    method, _, _ = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    wait_until(lambda: count(ch, dead) == 1, what="the rejected message in the policy's DLX")
    _, props, body = ch.basic_get(dead, auto_ack=True)
    assert body == b"m0" and props.headers["x-death"][0]["reason"] == "rejected"
    for name in (q, dead):
        ch.queue_delete(name)
    srv.admin(lambda b: b.delete_policy("/", q))
    conn.close()


def test_deleting_a_vhost_or_a_user_closes_their_connections(srv):
    vhost, user = uid("v"), uid("u")
    srv.admin(lambda b: (b.add_vhost(vhost), b.add_user(user, "pw"), b.set_permissions(user, vhost, ".*", ".*", ".*")))
    conn = connect(srv, vhost, user, "pw")
    conn.channel().queue_declare("in-vhost")
    srv.admin(lambda b: b.delete_vhost(vhost))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=10)
    assert info.value.reply_code == 320 and f"vhost '{vhost}' is deleted" in info.value.reply_text
    srv.admin(lambda b: (b.add_vhost(vhost), b.set_permissions(user, vhost, ".*", ".*", ".*")))
    conn = connect(srv, vhost, user, "pw")
    srv.admin(lambda b: b.delete_user(user))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=10)
    assert info.value.reply_code == 320 and f"user '{user}' was deleted" in info.value.reply_text
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(srv, vhost, user, "pw")
    srv.admin(lambda b: b.delete_vhost(vhost))
