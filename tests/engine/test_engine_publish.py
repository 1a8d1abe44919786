"""One publish path for every protocol: a STOMP SEND gets what an AMQP basic.publish gets from the
model (alternate exchange, CC/BCC sender-selected distribution, overflow refusal)."""

from __future__ import annotations

from enginetest_helpers import amqp, connected, messages, new_net, receipts, send, subscribe

from amqpproto import spec
from engine.testing import AmqpSimClient


def get_body(c: AmqpSimClient, queue: str) -> bytes | None:
    got = c.call(spec.BasicGet(queue=queue, no_ack=True, channel=1))
    return got.body if isinstance(got, spec.BasicGetOk) else None


def test_stomp_send_to_an_exchange_falls_back_to_its_alternate_exchange() -> None:
    net = new_net()
    admin = amqp(net)
    admin.call(spec.QueueDeclare(queue="unrouted", channel=1))
    admin.call(spec.QueueDeclare(queue="routed", channel=1))
    admin.call(spec.ExchangeDeclare(exchange="alt", type="fanout", channel=1))
    admin.call(spec.QueueBind(queue="unrouted", exchange="alt", channel=1))
    admin.call(spec.ExchangeDeclare(exchange="main", type="direct", arguments={"alternate-exchange": "alt"},
                                    channel=1))
    admin.call(spec.QueueBind(queue="routed", exchange="main", routing_key="known", channel=1))
    p = connected(net)
    send(p, "/exchange/main/nobody", b"to-alt", receipt="r1")
    send(p, "/exchange/main/known", b"to-main", receipt="r2")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in receipts(p)] == ["r1", "r2"]
    assert get_body(admin, "unrouted") == b"to-alt"
    assert get_body(admin, "unrouted") is None  # a routed message never reaches the alternate
    assert get_body(admin, "routed") == b"to-main"


def test_stomp_send_with_cc_and_bcc_headers_reaches_every_key() -> None:
    net = new_net()
    c = connected(net)
    for name in ("a", "b", "c"):
        subscribe(c, f"/queue/{name}", name)
    net.run_until_idle()
    c.events()
    p = connected(net)
    # STOMP header values are strings: the extra routing keys are comma-separated
    send(p, "/queue/a", b"cc", CC="b", BCC="c")
    send(p, "/queue/d", b"plain")
    net.run_until_idle()
    got = {m.headers["subscription"]: m for m in messages(c)}
    assert sorted(got) == ["a", "b", "c"]
    for m in got.values():
        assert m.body == b"cc"
        assert m.headers["CC"] == "b" and "BCC" not in m.headers  # BCC is never delivered


def test_stomp_cc_list_reaches_topic_subscribers_and_amqp_queues() -> None:
    net = new_net()
    admin = amqp(net)
    admin.call(spec.QueueDeclare(queue="audit", channel=1))
    admin.call(spec.QueueBind(queue="audit", exchange="amq.topic", routing_key="audit.#", channel=1))
    c = connected(net)
    subscribe(c, "/topic/orders.eu", "eu")
    net.run_until_idle()
    c.events()
    p = connected(net)
    send(p, "/topic/orders.us", b"order", CC="orders.eu,audit.orders")
    net.run_until_idle()
    assert [(m.headers["subscription"], m.body) for m in messages(c)] == [("eu", b"order")]
    assert get_body(admin, "audit") == b"order"
