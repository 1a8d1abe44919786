"""Three nodes over one PostgreSQL: membership, shared definitions, queue leadership and fencing
(real ``sansmq serve --node`` processes, pika and stomp.py clients on loopback)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pika
import pytest
import stomp
from clusterkit import LEASE, Nodes, wait_for

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def test_nodes_are_listed_by_cluster_status_and_every_node_api(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    status = nodes.status()
    listed = {n["name"]: n for n in status["nodes"]}
    assert set(listed) == {"a", "b", "c"}
    for node in (a, b, c):
        assert listed[node.name]["running"]
        # the advertised address is the link listener the node actually bound
        wait_for(lambda node=node: any(n["name"] == node.name and n["address"] == f"127.0.0.1:{node.link}"
                                       for n in nodes.status()["nodes"]), what="advertised address")
    api_nodes = b.api("nodes")
    assert sorted(n["name"] for n in api_nodes) == ["sansmq@a", "sansmq@b", "sansmq@c"]
    assert all(n["running"] for n in api_nodes)
    overview = b.api("overview")
    cluster = "sansmq@" + nodes.dsn.rsplit("/", 1)[1]
    assert (overview["node"], overview["cluster_name"]) == ("sansmq@b", cluster)
    assert b.api("cluster-name") == {"name": cluster}
    with urllib.request.urlopen(f"http://127.0.0.1:{b.prometheus}/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    assert f'rabbitmq_identity_info{{rabbitmq_cluster="{cluster}",rabbitmq_node="sansmq@b"}} 1.0' in metrics
    c.kill()
    wait_for(lambda: not next(n for n in b.api("nodes") if n["name"] == "sansmq@c")["running"],
             timeout=LEASE * 4, what="node c shown down")


def test_definitions_declared_on_one_node_are_in_force_on_all(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    conn = a.pika()
    ch = conn.channel()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.queue_declare("orders.eu", durable=True, arguments={"x-max-length": 1000})
    ch.queue_bind("orders.eu", "orders", "eu.#")
    a.api("vhosts/shop", "PUT", {})
    a.api("users/app", "PUT", {"password": "s3cret", "tags": ""})
    a.api("permissions/shop/app", "PUT", {"configure": ".*", "write": ".*", "read": ".*"})

    def visible_on(node) -> bool:
        try:
            probe = node.pika()
        except pika.exceptions.AMQPError:
            return False
        try:
            ch = probe.channel()
            ch.exchange_declare("orders", "topic", durable=True, passive=True)
            ok = ch.queue_declare("orders.eu", durable=True, passive=True, arguments={"x-max-length": 1000})
            return ok.method.queue == "orders.eu"
        except pika.exceptions.ChannelClosedByBroker:
            return False
        finally:
            if probe.is_open:
                probe.close()

    # bounded: the change log is read every 0.1 s (about 0.1 s measured; the bound leaves room for
    # a loaded machine)
    wait_for(lambda: visible_on(b) and visible_on(c), timeout=10, what="the declares on b and c")
    # the binding is in force on c: c routes to the queue (its leader a stores it)
    wait_for(lambda: [bd for bd in c.api("queues/%2F/orders.eu/bindings") if bd["source"] == "orders"],
             timeout=10, what="the binding on c")
    # the user, vhost and permission made on a log in on c
    user = wait_for(lambda: _login(c, "app", "s3cret", "shop"), timeout=10, what="user app on c")
    user.close()
    # a deletion too
    ch.queue_delete("orders.eu")
    wait_for(lambda: not visible_on(b), timeout=10, what="the delete on b")
    conn.close()


def _login(node, user: str, password: str, vhost: str):
    try:
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", node.amqp, vhost, pika.PlainCredentials(user, password), heartbeat=0))
    except pika.exceptions.AMQPError:
        return None


def test_the_declaring_node_leads_a_new_queue_and_keeps_its_messages(nodes: Nodes) -> None:
    a, b, _ = nodes.start("a", "b", "c")
    ch = b.publisher("jobs")
    for i in range(10):
        ch.basic_publish("", "jobs", str(i).encode(), PERSISTENT)
    assert nodes.leader("jobs") == ("b", 1)
    got = [ch.basic_get("jobs", auto_ack=True)[2] for _ in range(10)]
    assert got == [str(i).encode() for i in range(10)]
    # over STOMP on the leader too
    stomp_conn = stomp.Connection12([("127.0.0.1", b.stomp)], heartbeats=(0, 0), vhost="/")
    stomp_conn.connect("guest", "guest", wait=True)
    stomp_conn.send("/amq/queue/jobs", "via stomp", headers={"persistent": "true", "receipt": "r1"})
    stomp_conn.disconnect()


def test_a_publish_through_another_node_is_confirmed_once_the_leader_stored_it(nodes: Nodes) -> None:
    """b and c route and forward to the leader a over the link; their confirms and receipts follow
    a's commit; the consumer on a sees the original exchange, routing key and properties."""
    a, b, c = nodes.start("a", "b", "c")
    ch = a.pika().channel()
    ch.exchange_declare("events", "direct", durable=True)
    ch.queue_declare("only-a", durable=True)
    ch.queue_bind("only-a", "events", "created")
    wait_for(lambda: b.has_queue("only-a") and c.has_queue("only-a"), timeout=5, what="only-a on b and c")
    other = b.pika()
    och = other.channel()
    och.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json", headers={"n": 1},
                                 correlation_id="c1")
    for i in range(20):
        och.basic_publish("events", "created", b'{"i": %d}' % i, props, mandatory=True)
    other.close()
    stomp_conn = stomp.Connection12([("127.0.0.1", c.stomp)], heartbeats=(0, 0), vhost="/")
    receipts: list[str] = []

    class Receipts(stomp.ConnectionListener):
        def on_receipt(self, frame) -> None:  # noqa: ANN001 - stomp.py's frame
            receipts.append(frame.headers["receipt-id"])

    stomp_conn.set_listener("r", Receipts())
    stomp_conn.connect("guest", "guest", wait=True)
    stomp_conn.send("/exchange/events/created", "from stomp", headers={"persistent": "true", "receipt": "r1"})
    wait_for(lambda: receipts == ["r1"], timeout=10, what="the receipt from c")
    stomp_conn.disconnect()
    assert nodes.leader("only-a") == ("a", 1)
    got = []
    for _ in range(21):
        method, header, body = ch.basic_get("only-a", auto_ack=True)
        assert method is not None
        got.append((method.exchange, method.routing_key, body, header))
    assert [g[2] for g in got[:20]] == [b'{"i": %d}' % i for i in range(20)]
    assert got[20][2] == b"from stomp"
    assert all((ex, key) == ("events", "created") for ex, key, _, _ in got)
    header = got[0][3]
    assert (header.content_type, header.correlation_id, header.delivery_mode) == ("application/json", "c1", 2)
    assert header.headers == {"n": 1}  # the link's own header is not delivered


def test_a_publish_through_another_node_is_nacked_when_the_leader_is_gone(nodes: Nodes) -> None:
    a, b, _ = nodes.start("a", "b", "c")
    a.pika().channel().queue_declare("lonely", durable=True)
    wait_for(lambda: b.has_queue("lonely"), timeout=5, what="lonely on b")
    a.kill()
    och = b.pika().channel()
    och.confirm_delivery()
    with pytest.raises(pika.exceptions.NackError):
        och.basic_publish("", "lonely", b"x", PERSISTENT)


def test_a_consumer_on_another_node_is_served_through_the_leader(nodes: Nodes) -> None:
    """c consumes a queue led by a: deliveries come over the link, c's acks are a's acks; what c's
    consumer leaves unacked when it goes away is a's again, redelivered."""
    a, _, c = nodes.start("a", "b", "c")
    ch = a.pika().channel()
    ch.queue_declare("work", durable=True)
    ch.confirm_delivery()
    for i in range(60):
        ch.basic_publish("", "work", b"m%d" % i, PERSISTENT)
    wait_for(lambda: c.has_queue("work"), timeout=5, what="work on c")
    conn = c.pika()
    cch = conn.channel()
    cch.basic_qos(prefetch_count=10)
    got: list[bytes] = []

    def on_message(chan, method, _props, body) -> None:  # noqa: ANN001 - pika's callback
        got.append(body)
        if len(got) <= 50:
            chan.basic_ack(method.delivery_tag)

    cch.basic_consume("work", on_message)
    wait_for(lambda: conn.process_data_events(0.05) or len(got) >= 60, timeout=10, what="60 deliveries on c")
    assert got == [b"m%d" % i for i in range(60)]  # in the leader's order
    # the 50 acks reached a: 10 left there, unacked by c's consumer
    wait_for(lambda: a.api("queues/%2F/work")["messages"] == 10, timeout=5, what="50 acks on a")
    conn.close()
    # c's consumer went away: its 10 unacked deliveries are a's again, flagged redelivered
    wait_for(lambda: a.api("queues/%2F/work").get("messages_ready") == 10, timeout=5, what="10 requeued on a")
    left = []
    while (m := ch.basic_get("work", auto_ack=True))[0] is not None:
        left.append((m[2], m[0].redelivered))
    assert left == [(b"m%d" % i, True) for i in range(50, 60)]


def test_balanced_placement_spreads_new_leaders_over_the_live_nodes(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    time.sleep(LEASE / 2)  # a heard of b and c (the heartbeat reads the live nodes' load)
    conn = a.pika()
    ch = conn.channel()
    for i in range(3):
        ch.queue_declare(f"spread{i}", durable=True, arguments={"x-queue-leader-locator": "balanced"})
    leaders = sorted(nodes.leader(f"spread{i}")[0] for i in range(3))  # type: ignore[index]
    assert leaders == ["a", "b", "c"]
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", f"spread{i}", b"to %d" % i, PERSISTENT)  # forwarded to b and c as needed
    for i in range(3):
        leader = nodes[nodes.leader(f"spread{i}")[0]]  # type: ignore[index]
        wait_for(lambda leader=leader, i=i: leader.api(f"queues/%2F/spread{i}")["messages"] == 1, timeout=5,
                 what=f"spread{i} on its leader")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="x-queue-leader-locator"):
        ch.queue_declare("bad", durable=True, arguments={"x-queue-leader-locator": "anywhere"})


def test_kombu_producer_and_consumer_on_nodes_that_do_not_lead_the_queue(nodes: Nodes) -> None:
    """kombu (py-amqp) with a multi-host URL, publishing on b and consuming on c a queue a leads."""
    import kombu

    a, b, c = nodes.start("a", "b", "c")
    a.publisher("tasks")  # declared (and led) on a
    wait_for(lambda: b.has_queue("tasks") and c.has_queue("tasks"), timeout=5, what="tasks on b and c")
    exchange = kombu.Exchange("", type="direct")
    queue = kombu.Queue("tasks", exchange, routing_key="tasks", durable=True)
    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{b.amqp}//;amqp://guest:guest@127.0.0.1:{a.amqp}//",
                          transport_options={"confirm_publish": True}) as conn:
        producer = conn.Producer()
        for i in range(5):
            producer.publish({"n": i}, exchange=exchange, routing_key="tasks", declare=[queue],
                             delivery_mode=2, serializer="json")
    got: list[int] = []
    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{c.amqp}//") as conn:
        def on_message(body: dict, message: kombu.Message) -> None:
            got.append(body["n"])
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message], accept=["json"]):
            deadline = time.monotonic() + 10
            while len(got) < 5 and time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=0.5)
                except TimeoutError:
                    pass
    assert got == [0, 1, 2, 3, 4]
    wait_for(lambda: a.api("queues/%2F/tasks")["messages"] == 0, timeout=5, what="acks on a")
    assert nodes.leader("tasks") == ("a", 1)


def test_basic_get_on_a_node_that_does_not_lead_the_queue_is_served_by_the_leader(nodes: Nodes) -> None:
    """pika's basic_get on b of a queue a leads: the message, its redelivered flag and the leader's
    count; b's ack, reject and nack settle it on a; no-ack gets; get-empty when a has none."""
    a, b, c = nodes.start("a", "b", "c")
    ch = a.publisher("fetch")
    for i in range(6):
        ch.basic_publish("", "fetch", b"m%d" % i, pika.BasicProperties(delivery_mode=2, headers={"i": i}))
    wait_for(lambda: b.has_queue("fetch"), timeout=5, what="fetch on b")
    conn = b.pika()
    bch = conn.channel()
    method, props, body = bch.basic_get("fetch", auto_ack=False)
    assert method is not None, "b found the queue empty"
    assert (body, method.redelivered, method.message_count, props.headers) == (b"m0", False, 5, {"i": 0})
    bch.basic_ack(method.delivery_tag)  # acked on a
    wait_for(lambda: a.api("queues/%2F/fetch")["messages"] == 5, timeout=5, what="the ack on a")
    method, _, body = bch.basic_get("fetch", auto_ack=False)
    assert body == b"m1"
    bch.basic_reject(method.delivery_tag, requeue=True)  # back on a, at the head, redelivered
    method, _, body = bch.basic_get("fetch", auto_ack=False)
    assert (body, method.redelivered) == (b"m1", True)
    bch.basic_nack(method.delivery_tag, requeue=False)  # dropped (no dead-letter exchange)
    method, _, body = bch.basic_get("fetch", auto_ack=True)  # no-ack: gone on a at once
    assert (body, method.message_count) == (b"m2", 3)
    method, _, body = bch.basic_get("fetch", auto_ack=False)
    assert body == b"m3"
    conn.close()  # closed unacked: a has it again, redelivered
    wait_for(lambda: a.api("queues/%2F/fetch").get("messages_ready") == 3, timeout=5, what="m3 back on a")
    left = [(m[2], m[0].redelivered) for m in (ch.basic_get("fetch", auto_ack=True) for _ in range(3))]
    assert left == [(b"m3", True), (b"m4", False), (b"m5", False)]
    bch = b.pika().channel()
    assert bch.basic_get("fetch", auto_ack=True) == (None, None, None)  # get-empty from the leader
    # kombu's Queue.get on the third node (py-amqp's basic.get), acked there
    import kombu

    ch.basic_publish("", "fetch", b"for kombu", PERSISTENT)
    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{c.amqp}//") as kconn:
        wait_for(lambda: c.has_queue("fetch"), timeout=5, what="fetch on c")
        message = kombu.Queue("fetch", no_declare=True)(kconn.default_channel).get(no_ack=False)
        assert message is not None and message.body == b"for kombu"
        message.ack()
    wait_for(lambda: a.api("queues/%2F/fetch")["messages"] == 0, timeout=5, what="kombu's ack on a")
    assert nodes.leader("fetch") == ("a", 1)


def test_a_queue_leader_locator_policy_places_new_queues_and_the_argument_wins(nodes: Nodes) -> None:
    """RabbitMQ 3.10+'s policy key ``queue-leader-locator``, applied when a queue is declared."""
    a, b, c = nodes.start("a", "b", "c")
    time.sleep(LEASE / 2)  # a heard of b and c (the heartbeat reads the live nodes' load)
    with pytest.raises(urllib.error.HTTPError):  # refused as RabbitMQ refuses it
        a.api("policies/%2F/bad", "PUT", {"pattern": ".*", "definition": {"queue-leader-locator": "anywhere"}})
    a.api("policies/%2F/spread", "PUT", {"pattern": "^pol\\.", "apply-to": "queues",
                                         "definition": {"queue-leader-locator": "balanced"}})
    conn = a.pika()
    ch = conn.channel()
    for i in range(3):
        ch.queue_declare(f"pol.{i}", durable=True)
    ch.queue_declare("pol.mine", durable=True, arguments={"x-queue-leader-locator": "client-local"})
    ch.queue_declare("unmatched", durable=True)
    conn.close()
    leaders = nodes.leaders()
    assert sorted(leaders[f"pol.{i}"] for i in range(3)) == ["a", "b", "c"], leaders
    assert (leaders["pol.mine"], leaders["unmatched"]) == ("a", "a")  # the argument wins; no policy
    # declared on b once the policy reached it: placed by b the same way
    wait_for(lambda: any(p["name"] == "spread" for p in b.api("policies")), timeout=10, what="the policy on b")
    time.sleep(LEASE / 2)  # b's heartbeat read the load: a leads 3, b and c 1 each
    conn = b.pika()
    conn.channel().queue_declare("pol.from-b", durable=True)
    conn.close()
    assert nodes.leaders()["pol.from-b"] in ("b", "c")
