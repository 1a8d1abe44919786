"""Per-vhost and per-user limits (issue 23.8), as RabbitMQ's ``set_vhost_limits`` and
``set_user_limits``: refused with RabbitMQ's errors on AMQP and STOMP, counted until connections end,
kept by the store."""

from __future__ import annotations

import random

import pytest
from enginetest_helpers import new_net, send

from amqpproto import spec
from engine import Broker, Config, User
from engine.model import NotFound, PreconditionFailed
from engine.store import MemoryStore
from engine.testing import AmqpSimClient, SimNetwork
from stompproto import Connected, Error


def amqp_open(net: SimNetwork, user: str = "guest", password: str = "guest") -> tuple[AmqpSimClient, object]:
    c = net.connect(protocol="amqp")
    assert isinstance(c, AmqpSimClient)
    return c, c.amqp_open(user, password)


def limited_net() -> SimNetwork:
    cfg = Config()
    cfg.users["app"] = User("app", "pw")
    return new_net(cfg)


def test_vhost_connection_limit_refuses_amqp_and_stomp_with_rabbitmqs_errors() -> None:
    net = limited_net()
    net.broker.set_limit("vhost", "/", "max-connections", 1)
    first, ok = amqp_open(net)
    assert isinstance(ok, spec.ConnectionOpenOk)
    _, refused = amqp_open(net, "app", "pw")
    assert isinstance(refused, spec.ConnectionClose) and refused.reply_code == 530
    assert refused.reply_text == ("NOT_ALLOWED - access to vhost '/' refused for user 'app': connection limit (1) "
                                  "is reached")
    err = net.connect().stomp_connect()
    assert isinstance(err, Error)
    assert err.headers["message"] == "Access refused: Connection refused: vhost connection limit reached"
    # the count follows connections that end: the slot is free again
    first.drop()
    net.run_until_idle()
    assert isinstance(net.connect().stomp_connect(), Connected)
    # a negative value means no limit, as in RabbitMQ
    net.broker.set_limit("vhost", "/", "max-connections", -1)
    assert isinstance(amqp_open(net)[1], spec.ConnectionOpenOk)


def test_user_connection_and_channel_limits() -> None:
    net = limited_net()
    net.broker.set_limit("user", "app", "max-connections", 1)
    net.broker.set_limit("user", "app", "max-channels", 2)
    c, ok = amqp_open(net, "app", "pw")
    assert isinstance(ok, spec.ConnectionOpenOk)
    _, refused = amqp_open(net, "app", "pw")
    assert isinstance(refused, spec.ConnectionClose) and refused.reply_code == 530
    assert refused.reply_text == "NOT_ALLOWED - Connection refused for user 'app': user connection limit (1) is reached"
    assert isinstance(amqp_open(net)[1], spec.ConnectionOpenOk)  # other users are not limited
    err = net.connect().stomp_connect({"login": "app", "passcode": "pw"})
    assert isinstance(err, Error) and "user connection limit reached" in err.headers["message"]
    assert isinstance(c.open_channel(1), spec.ChannelOpenOk) and isinstance(c.open_channel(2), spec.ChannelOpenOk)
    closed = c.open_channel(3)
    assert isinstance(closed, spec.ConnectionClose) and closed.reply_code == 530
    assert closed.reply_text == ("NOT_ALLOWED - number of channels opened for user 'app' has reached the maximum "
                                 "allowed user limit of (2)")


def test_vhost_queue_limit_is_406_on_amqp_and_an_error_on_stomp() -> None:
    net = limited_net()
    c, _ = amqp_open(net)
    c.open_channel(1)
    assert isinstance(c.call(spec.QueueDeclare(queue="q1", channel=1)), spec.QueueDeclareOk)
    net.broker.set_limit("vhost", "/", "max-queues", 1)
    assert isinstance(c.call(spec.QueueDeclare(queue="q1", channel=1)), spec.QueueDeclareOk)  # exists: fine
    closed = c.call(spec.QueueDeclare(queue="q2", channel=1))
    assert isinstance(closed, spec.ChannelClose) and closed.reply_code == 406
    assert closed.reply_text == "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost '/' (1) is reached"
    s = net.connect()
    assert isinstance(s.stomp_connect(), Connected)
    send(s, "/queue/q3", b"x")
    net.run_until_idle()
    err = s.frames(Error)
    assert err and "queue limit in vhost '/' (1) is reached" in err[0].body.decode()


def test_limits_are_checked_kept_and_dropped_with_their_owner() -> None:
    store = MemoryStore()
    b = Broker(Config(users={"app": User("app", "pw")}), store, random.Random(0))
    with pytest.raises(PreconditionFailed, match="unknown vhost limit 'max-sessions'"):
        b.set_limit("vhost", "/", "max-sessions", 1)
    with pytest.raises(PreconditionFailed, match="must be an integer"):
        b.set_limit("user", "app", "max-channels", "10")
    with pytest.raises(NotFound):
        b.set_limit("user", "nobody", "max-channels", 1)
    b.set_limit("vhost", "/", "max-queues", 5)
    b.set_limit("user", "app", "max-channels", 3)
    again = Broker(Config(users={"app": User("app", "pw")}), store, random.Random(0))
    assert again.model.limits.of("vhost", "/") == {"max-queues": 5}
    assert again.model.limits.of("user", "app") == {"max-channels": 3}
    again.delete_user("app")
    again.clear_limit("vhost", "/", "max-queues")
    with pytest.raises(NotFound):
        again.clear_limit("vhost", "/", "max-queues")
    third = Broker(Config(users={"app": User("app", "pw")}), store, random.Random(0))
    assert third.model.limits.of("vhost", "/") == {} and third.model.limits.of("user", "app") == {}
