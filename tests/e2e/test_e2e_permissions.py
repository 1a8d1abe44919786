"""Users and permissions with real clients on every server kind: pika (403 ACCESS_REFUSED on the
channel, 530 NOT_ALLOWED on connection.open), stomp.py and STOMP over WebSocket (ERROR frames).

The broker is built with a definitions file imported (as ``--definitions`` does): user ``app`` may
configure, write and read only resources named ``app-*`` in vhost ``/`` and has no access to vhost
``other``, and on the topic exchange ``app-topics`` only routing keys ``app.*`` (topic permissions);
``reader`` may only read."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
import stomp
from e2ekit import Collector, WsAmqp, WsStomp, close_quietly, uid
from websockets.sync.client import connect as ws_connect

import servers
from amqpproto import spec
from engine import Config
from engine.model.security import hash_password

pytestmark = pytest.mark.timeout(120)

#: a client_id / user name that, read as a regex, backtracks exponentially on "aaaa...!"
REDOS = "(a+)+$"
#: a routing key that would make the unescaped pattern backtrack (2**24 paths: seconds, not ms)
REDOS_KEY = "a" * 24 + "!"

DEFINITIONS = {
    "users": [
        {"name": "app", "password_hash": hash_password("app-pw", b"\x00\x01\x02\x03"),
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []},
        {"name": "tp", "password_hash": hash_password("tp-pw", b"\x05\x05\x05\x05"),
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []},
        {"name": "reader", "password_hash": hash_password("reader-pw", b"\x09\x08\x07\x06"),
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["monitoring"]},
        # a user name that is a catastrophic regex: {username} must be substituted as text
        {"name": REDOS, "password_hash": hash_password("redos-pw", b"\x01\x01\x01\x01"),
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []},
    ],
    "vhosts": [{"name": "/"}, {"name": "other"}],
    "permissions": [
        {"user": "app", "vhost": "/", "configure": "^app-", "write": "^app-", "read": "^app-"},
        {"user": "reader", "vhost": "/", "configure": "", "write": "", "read": ".*"},
        {"user": "tp", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": REDOS, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
    ],
    "queues": [{"name": "guest-q", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
               {"name": "app-fixed", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
    "exchanges": [{"name": "app-x", "vhost": "/", "type": "topic", "durable": True, "auto_delete": False,
                   "internal": False, "arguments": {}},
                  {"name": "app-topics", "vhost": "/", "type": "topic", "durable": True, "auto_delete": False,
                   "internal": False, "arguments": {}}],
    # topic authorisation on app-topics only: publish with "app." or "<client_id>." keys, bind "app." ones
    "topic_permissions": [{"user": "app", "vhost": "/", "exchange": "app-topics",
                           "write": "^{username}\\.|^{client_id}\\.", "read": "^{username}\\."},
                          {"user": "tp", "vhost": "/", "exchange": "amq.topic", "write": "", "read": "^tp\\."},
                          {"user": REDOS, "vhost": "/", "exchange": "app-topics", "write": "^{username}\\.",
                           "read": ""}],
}


@pytest.fixture(scope="module")
def srv(kind: str) -> Iterator[servers.Running]:
    broker = servers.make_broker(Config())
    assert broker.import_definitions(DEFINITIONS) == []
    listeners = [("amqp", "127.0.0.1", 0), ("stomp", "127.0.0.1", 0), ("ws", "127.0.0.1", 0)]
    with servers.running(kind, listeners, broker=broker) as running:
        yield running


def params(srv: servers.Running, user: str, password: str, vhost: str = "/") -> pika.ConnectionParameters:
    host, port = srv.address("amqp")
    return pika.ConnectionParameters(host, port, vhost, pika.PlainCredentials(user, password),
                                     connection_attempts=1, socket_timeout=10, blocked_connection_timeout=10)


@contextlib.contextmanager
def channel(srv: servers.Running, user: str = "app", password: str = "app-pw") -> Iterator:
    conn = pika.BlockingConnection(params(srv, user, password))
    try:
        yield conn.channel()
    finally:
        if conn.is_open:
            conn.close()


def refused(ch_call, text: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch_call()
    assert info.value.reply_code == 403
    assert info.value.reply_text == f"ACCESS_REFUSED - {text}"


def test_amqp_vhost_without_permission_is_530(srv):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:  # pika's name for a 530 at open
        pika.BlockingConnection(params(srv, "app", "app-pw", "other"))
    assert '(530) "NOT_ALLOWED - access to vhost \'other\' refused for user \'app\'"' in str(info.value)


def test_amqp_wrong_password_is_refused(srv):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params(srv, "app", "wrong"))


def test_amqp_configure_permission(srv):
    with channel(srv) as ch:
        ch.queue_declare("app-q1", auto_delete=True)
        refused(lambda: ch.queue_declare("q-forbidden"),
                "access to queue 'q-forbidden' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:  # server-named queues are amq.gen-*: outside ^app-
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("", exclusive=True)
        assert info.value.reply_code == 403 and "access to queue 'amq.gen-" in info.value.reply_text
    with channel(srv) as ch:
        refused(lambda: ch.exchange_declare("x-forbidden", "direct"),
                "access to exchange 'x-forbidden' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:
        refused(lambda: ch.queue_delete("guest-q"), "access to queue 'guest-q' in vhost '/' refused for user 'app'")


def test_amqp_alternate_and_dead_letter_exchanges_need_write(srv):
    """As rabbit_channel: declaring a new exchange with an alternate exchange, or a new queue with
    a dead-letter exchange, needs read on the new object and write on the exchange it names; a
    name that is not a string is 406."""
    with channel(srv) as ch:
        ch.exchange_declare("app-ae-ok", "fanout", auto_delete=True, arguments={"alternate-exchange": "app-x"})
        refused(lambda: ch.exchange_declare("app-ae-bad", "fanout", arguments={"alternate-exchange": "amq.fanout"}),
                "access to exchange 'amq.fanout' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:
        ch.queue_declare("app-dlx-ok", auto_delete=True, arguments={"x-dead-letter-exchange": "app-x"})
        refused(lambda: ch.queue_declare("app-dlx-bad", arguments={"x-dead-letter-exchange": "forbidden-dlx"}),
                "access to exchange 'forbidden-dlx' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:  # the default exchange is the resource amq.default
        refused(lambda: ch.queue_declare("app-dlx-default", arguments={"x-dead-letter-exchange": ""}),
                "access to exchange 'amq.default' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.exchange_declare("app-ae-int", "fanout", arguments={"alternate-exchange": 5})
        assert (info.value.reply_code, info.value.reply_text) == (
            406, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange "
                 "'app-ae-int' in vhost '/'")
    with channel(srv, "guest", "guest") as ch:  # an existing queue is not checked again: guest made it
        ch.queue_declare("app-dlx-existing", auto_delete=False, arguments={"x-dead-letter-exchange": "forbidden-dlx"})
    with channel(srv) as ch:
        ch.queue_declare("app-dlx-existing", auto_delete=False, arguments={"x-dead-letter-exchange": "forbidden-dlx"})
        ch.queue_delete("app-dlx-existing")


def test_amqp_publish_needs_write_on_the_exchange(srv):
    with channel(srv) as ch:
        ch.basic_publish("app-x", "k", b"ok")  # allowed: no error comes back
        ch.queue_declare("app-q2", auto_delete=True)
        ch.basic_publish("", "app-q2", b"refused")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("app-q2", passive=True)  # the close of the publish arrives first
        assert info.value.reply_code == 403
        assert info.value.reply_text == ("ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' "
                                         "refused for user 'app'")


def test_amqp_bind_needs_write_on_queue_and_read_on_exchange(srv):
    with channel(srv) as ch:
        ch.queue_declare("app-q3", auto_delete=True)
        ch.queue_bind("app-q3", "app-x", "k")
        refused(lambda: ch.queue_bind("app-q3", "amq.topic", "k"),
                "access to exchange 'amq.topic' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:
        refused(lambda: ch.queue_bind("guest-q", "app-x", "k"),
                "access to queue 'guest-q' in vhost '/' refused for user 'app'")


def test_amqp_consume_get_and_purge_need_read(srv):
    with channel(srv) as ch:
        refused(lambda: ch.basic_get("guest-q"), "access to queue 'guest-q' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:
        refused(lambda: ch.basic_consume("guest-q", lambda *a: None),
                "access to queue 'guest-q' in vhost '/' refused for user 'app'")
    with channel(srv) as ch:
        refused(lambda: ch.queue_purge("guest-q"), "access to queue 'guest-q' in vhost '/' refused for user 'app'")
    with channel(srv, "reader", "reader-pw") as ch:  # read-only: get works, declare does not
        assert ch.basic_get("guest-q") == (None, None, None)
        refused(lambda: ch.queue_declare("app-q4"), "access to queue 'app-q4' in vhost '/' refused for user 'reader'")


def test_amqp_an_allowed_round_trip(srv):
    with channel(srv) as ch:
        ch.queue_bind("app-fixed", "app-x", "rk")
        ch.basic_publish("app-x", "rk", b"hello")
        for _ in range(200):
            method, _, body = ch.basic_get("app-fixed", auto_ack=True)
            if method is not None:
                break
        assert body == b"hello"


def stomp_conn(srv: servers.Running, user: str, password: str) -> tuple[stomp.Connection, Collector]:
    conn = stomp.Connection([srv.address("stomp")], heartbeats=(0, 0), auto_content_length=True)
    col = Collector()
    conn.set_listener("c", col)
    conn.connect(user, password, wait=True, headers={"host": "/"})
    return conn, col


def test_stomp_send_to_a_forbidden_queue_is_an_error_frame(srv):
    conn, col = stomp_conn(srv, "app", "app-pw")
    try:
        conn.send("/queue/forbidden", "x")
        col.wait(lambda: col.errors, what="ERROR")
        err = col.errors[0]
        assert err.headers["message"] == "access_refused"
        assert err.body == "ACCESS_REFUSED - access to queue 'forbidden' in vhost '/' refused for user 'app'"
    finally:
        close_quietly(conn)


def test_stomp_subscribe_to_a_topic_needs_read_on_amq_topic(srv):
    conn, col = stomp_conn(srv, "app", "app-pw")
    try:
        conn.subscribe("/topic/news", id="t1")
        col.wait(lambda: col.errors, what="ERROR")
        assert "access to queue 'stomp-subscription-t1'" in col.errors[0].body
    finally:
        close_quietly(conn)


def test_stomp_allowed_queue_round_trip(srv):
    conn, col = stomp_conn(srv, "app", "app-pw")
    try:
        name = uid("app-s")
        conn.subscribe("/amq/queue/app-fixed", id="s1")
        conn.send("/exchange/app-x/rk", "via-exchange", receipt="r1")
        col.wait_receipt("r1")
        assert col.wait_messages(1)[0].body == "via-exchange"
        assert not col.errors, name
    finally:
        close_quietly(conn)


def test_stomp_vhost_without_permission_is_refused(srv):
    conn = stomp.Connection([srv.address("stomp")], heartbeats=(0, 0))
    col = Collector()
    conn.set_listener("c", col)
    with pytest.raises(stomp.exception.ConnectFailedException):
        conn.connect("app", "app-pw", wait=True, headers={"host": "other"})
    assert "access to vhost 'other' refused for user 'app'" in col.errors[0].headers["message"]


def web_stomp_as_app(ws) -> WsStomp:
    """A STOMP-over-WebSocket session logged in as ``app``."""
    c = WsStomp(ws)
    c.send("CONNECT", {"accept-version": "1.2", "host": "/", "login": "app", "passcode": "app-pw", "heart-beat": "0,0"})
    c.expect("CONNECTED")
    return c


def test_web_stomp_send_to_a_forbidden_queue_is_an_error_frame(srv):
    host, port = srv.address("ws")
    with ws_connect(f"ws://{host}:{port}/ws", subprotocols=["v12.stomp"], open_timeout=10) as ws:
        c = web_stomp_as_app(ws)
        c.send("SUBSCRIBE", {"destination": "/queue/guest-q", "id": "s"})
        headers, body = c.expect("ERROR")
        assert headers["message"] == "access_refused"
        assert body == b"ACCESS_REFUSED - access to queue 'guest-q' in vhost '/' refused for user 'app'"


def test_amqp_over_websocket_is_checked_too(srv):
    host, port = srv.address("ws")
    with ws_connect(f"ws://{host}:{port}/ws/amqp", subprotocols=["amqp"], open_timeout=10) as ws:
        c = WsAmqp(ws)
        c.open("app", "app-pw")
        c.send(spec.QueueDeclare(queue="not-app", channel=1))
        close = c.expect(spec.ChannelClose)
        assert close.reply_code == 403
        assert close.reply_text == "ACCESS_REFUSED - access to queue 'not-app' in vhost '/' refused for user 'app'"


TOPIC_REFUSED = "access to topic '{}' in exchange 'app-topics' in vhost '/' refused for user 'app'"


def test_amqp_topic_permissions_on_publish_and_bind(srv):
    with channel(srv) as ch:
        ch.basic_publish("app-topics", "app.ok", b"allowed")
        ch.queue_bind("app-fixed", "app-topics", "app.#")
        ch.queue_unbind("app-fixed", "app-topics", "app.#")
        refused(lambda: (ch.basic_publish("app-topics", "other.no", b"refused"),
                         ch.queue_declare("app-fixed", passive=True)), TOPIC_REFUSED.format("other.no"))
    with channel(srv) as ch:
        refused(lambda: ch.queue_bind("app-fixed", "app-topics", "other.#"), TOPIC_REFUSED.format("other.#"))
    with channel(srv) as ch:  # app-x has no topic permission: any key
        ch.basic_publish("app-x", "other.no", b"allowed")
        ch.queue_declare("app-fixed", passive=True)
    with channel(srv, "guest", "guest") as ch:  # nor has guest on app-topics
        ch.basic_publish("app-topics", "other.no", b"allowed")
        ch.queue_declare("app-fixed", passive=True)


def test_amqp_topic_permission_variables_include_the_client_id(srv):
    host, port = srv.address("amqp")
    props = {"client_id": "dev7"}
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        host, port, "/", pika.PlainCredentials("app", "app-pw"), client_properties=props, connection_attempts=1))
    try:
        ch = conn.channel()
        ch.basic_publish("app-topics", "dev7.reading", b"allowed through {client_id}")
        ch.queue_declare("app-fixed", passive=True)
    finally:
        conn.close()
    with channel(srv) as ch:  # without a client_id the variable matches nothing
        refused(lambda: (ch.basic_publish("app-topics", "dev7.reading", b"refused"),
                         ch.queue_declare("app-fixed", passive=True)), TOPIC_REFUSED.format("dev7.reading"))


def test_stomp_topic_permissions_on_send_and_subscribe(srv):
    conn, col = stomp_conn(srv, "app", "app-pw")
    try:
        conn.send("/exchange/app-topics/app.ok", "allowed", receipt="r1")
        col.wait_receipt("r1")
        conn.send("/exchange/app-topics/other.no", "refused")
        col.wait(lambda: col.errors, what="ERROR")
        assert col.errors[0].headers["message"] == "access_refused"
        assert TOPIC_REFUSED.format("other.no") in col.errors[0].body
    finally:
        close_quietly(conn)
    for durable in (False, True):  # a queue-less subscription and one with a queue bound
        conn, col = stomp_conn(srv, "tp", "tp-pw")  # tp may configure any queue: the topic check decides
        try:
            headers = {"durable": "true", "auto-delete": "true"} if durable else {}
            conn.subscribe("/topic/tp.news", id="ok", headers=headers, receipt="s1")
            col.wait_receipt("s1")
            conn.subscribe("/topic/other.*", id="t1", headers=headers)
            col.wait(lambda c=col: c.errors, what="ERROR")
            assert ("access to topic 'other.*' in exchange 'amq.topic' in vhost '/' refused for user 'tp'"
                    in col.errors[0].body)
        finally:
            close_quietly(conn)


def test_topic_permissions_over_websocket(srv):
    host, port = srv.address("ws")
    with ws_connect(f"ws://{host}:{port}/ws", subprotocols=["v12.stomp"], open_timeout=10) as ws:
        c = web_stomp_as_app(ws)
        c.send("SEND", {"destination": "/exchange/app-topics/other.no"}, b"refused")
        headers, body = c.expect("ERROR")
        assert headers["message"] == "access_refused" and TOPIC_REFUSED.format("other.no").encode() in body
    with ws_connect(f"ws://{host}:{port}/ws/amqp", subprotocols=["amqp"], open_timeout=10) as ws:
        c = WsAmqp(ws)
        c.open("app", "app-pw")
        c.send(spec.QueueBind(queue="app-fixed", exchange="app-topics", routing_key="other.#", channel=1))
        close = c.expect(spec.ChannelClose)
        assert (close.reply_code, close.reply_text) == (403, "ACCESS_REFUSED - " + TOPIC_REFUSED.format("other.#"))


def test_amqp_client_id_is_substituted_literally_and_quickly(srv):
    """Issue 23 item 6: a client_id of ``(a+)+$`` is six characters to match, not a regex that
    freezes the broker for the length of one publish."""
    host, port = srv.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        host, port, "/", pika.PlainCredentials("app", "app-pw"), client_properties={"client_id": REDOS},
        connection_attempts=1, socket_timeout=10))
    try:
        ch = conn.channel()
        ch.basic_publish("app-topics", REDOS + ".reading", b"the literal client_id")
        ch.queue_declare("app-fixed", passive=True)
        started = time.monotonic()
        refused(lambda: (ch.basic_publish("app-topics", REDOS_KEY, b"refused"),
                         ch.queue_declare("app-fixed", passive=True)), TOPIC_REFUSED.format(REDOS_KEY))
        assert time.monotonic() - started < 2.0
    finally:
        if conn.is_open:
            conn.close()


def test_stomp_username_is_substituted_literally_and_quickly(srv):
    conn, col = stomp_conn(srv, REDOS, "redos-pw")
    try:
        conn.send(f"/exchange/app-topics/{REDOS}.ok", "the literal user name", receipt="r1")
        col.wait_receipt("r1")
        started = time.monotonic()
        conn.send(f"/exchange/app-topics/{REDOS_KEY}", "refused")
        col.wait(lambda: col.errors, timeout=5, what="ERROR")
        assert time.monotonic() - started < 2.0
        assert (f"access to topic '{REDOS_KEY}' in exchange 'app-topics' in vhost '/' refused for user '{REDOS}'"
                in col.errors[0].body)
    finally:
        close_quietly(conn)
