"""Every STOMP destination kind, durable and prefix subscriptions, control destinations."""

from enginetest_helpers import bodies, connected, errors, messages, new_net, send, subscribe, unsubscribe

from stompproto import Error, Receipt, Subscribe, Unsubscribe


def test_queue_competing_consumers_round_robin():
    net = new_net()
    a, b, p = connected(net), connected(net), connected(net)
    subscribe(a, "/queue/work", "s")
    subscribe(b, "/queue/work", "s")
    net.run_until_idle()
    for i in range(6):
        send(p, "/queue/work", b"%d" % i)
    net.run_until_idle()
    assert bodies(a) == [b"0", b"2", b"4"]
    assert bodies(b) == [b"1", b"3", b"5"]


def test_queue_declared_on_send_keeps_messages_until_subscribe():
    net = new_net()
    p = connected(net)
    send(p, "/queue/later", b"x")
    net.run_until_idle()
    c = connected(net)
    subscribe(c, "/queue/later", "1")
    net.run_until_idle()
    [m] = messages(c)
    assert m.body == b"x"
    assert m.headers["destination"] == "/queue/later"
    assert m.headers["subscription"] == "1"
    assert m.headers["content-length"] == "1"


def test_topic_fanout_to_each_subscription_with_patterns():
    net = new_net()
    a, b, p = connected(net), connected(net), connected(net)
    subscribe(a, "/topic/stocks.*", "1")
    subscribe(b, "/topic/stocks.#", "1")
    subscribe(b, "/topic/stocks.ibm", "2")
    net.run_until_idle()
    send(p, "/topic/stocks.ibm", b"ibm")
    send(p, "/topic/stocks.ibm.nyse", b"nyse")
    send(p, "/topic/bonds", b"bonds")
    net.run_until_idle()
    assert bodies(a) == [b"ibm"]
    got = messages(b)
    assert sorted((m.headers["subscription"], m.body) for m in got) == [("1", b"ibm"), ("1", b"nyse"), ("2", b"ibm")]
    assert all(m.headers["destination"].startswith("/topic/stocks.ibm") for m in got)


def test_topic_without_subscribers_drops_and_unsubscribe_stops():
    net = new_net()
    a, p = connected(net), connected(net)
    send(p, "/topic/t", b"lost")
    net.run_until_idle()
    subscribe(a, "/topic/t", "1")
    net.run_until_idle()
    send(p, "/topic/t", b"one")
    net.run_until_idle()
    assert bodies(a) == [b"one"]
    unsubscribe(a, "1")
    net.run_until_idle()
    send(p, "/topic/t", b"two")
    net.run_until_idle()
    assert bodies(a) == []
    # the per-subscription queue is gone
    vhost = net.broker.model.vhosts["/"]
    assert [q for q in vhost.queues if q.startswith("stomp-sub-")] == []


def test_exchange_destination_and_missing_exchange():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/exchange/amq.direct/key1", "1")
    net.run_until_idle()
    send(p, "/exchange/amq.direct/key1", b"yes")
    send(p, "/exchange/amq.direct/key2", b"no")
    net.run_until_idle()
    [m] = messages(a)
    assert m.body == b"yes" and m.headers["destination"] == "/exchange/amq.direct/key1"
    subscribe(a, "/exchange/nope/k", "2", receipt="r")
    net.run_until_idle()
    [err] = errors(a)
    assert err.headers["message"] == "not_found"
    assert err.headers["receipt-id"] == "r"
    assert a.server_closed
    # the publisher is unaffected
    send(p, "/exchange/nope/k", b"x")
    net.run_until_idle()
    assert errors(p) and errors(p)[0].headers["message"] == "not_found"


def test_amq_queue_requires_existing_queue():
    net = new_net()
    a = connected(net)
    subscribe(a, "/amq/queue/missing", "1")
    net.run_until_idle()
    assert errors(a)[0].headers["message"] == "not_found"
    b, p = connected(net), connected(net)
    send(p, "/queue/exists", b"1")
    net.run_until_idle()
    subscribe(b, "/amq/queue/exists", "1")
    send(p, "/amq/queue/exists", b"2")
    net.run_until_idle()
    assert bodies(b) == [b"1", b"2"]


def test_temp_queue_reply_to_round_trip():
    net = new_net()
    server, client = connected(net), connected(net)
    subscribe(server, "/queue/rpc", "1")
    net.run_until_idle()
    send(client, "/queue/rpc", b"ping", reply_to="/temp-queue/answers", correlation_id="c1")
    net.run_until_idle()
    [req] = messages(server)
    reply_to = req.headers["reply-to"]
    assert reply_to.startswith("/reply-queue/amq.gen-")
    assert req.headers["correlation-id"] == "c1"
    send(server, reply_to, b"pong", correlation_id="c1")
    net.run_until_idle()
    [rep] = messages(client)
    assert rep.body == b"pong"
    assert rep.headers["subscription"] == "/temp-queue/answers"
    assert rep.headers["destination"] == "/temp-queue/answers"
    # the same temp name reuses the queue; the queue dies with the connection
    send(client, "/queue/rpc", b"ping2", reply_to="/temp-queue/answers")
    net.run_until_idle()
    assert messages(server)[0].headers["reply-to"] == reply_to
    client.close()
    net.run_until_idle()
    assert reply_to[len("/reply-queue/"):] not in net.broker.model.vhosts["/"].queues


def test_temp_queue_names_are_not_sequential_guesses():
    net = new_net(seed=5)
    c = connected(net)
    send(c, "/queue/x", b"", reply_to="/temp-queue/a")
    send(c, "/queue/x", b"", reply_to="/temp-queue/b")
    net.run_until_idle()
    names = [n for n in net.broker.model.vhosts["/"].queues if n.startswith("amq.gen-")]
    assert len(names) == 2 and len(set(n.rsplit("-", 1)[1] for n in names)) == 2


def test_durable_topic_subscription_keeps_receiving_while_away():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/news", "daily", durable="true", auto_delete="false")
    net.run_until_idle()
    send(p, "/topic/news", b"1")
    net.run_until_idle()
    assert bodies(a) == [b"1"]
    a.close()
    net.run_until_idle()
    send(p, "/topic/news", b"2")
    send(p, "/topic/news", b"3")
    net.run_until_idle()
    a2 = connected(net)
    subscribe(a2, "/topic/news", "daily", persistent="true")
    net.run_until_idle()
    assert bodies(a2) == [b"2", b"3"]
    unsubscribe(a2, "daily", durable="true")
    net.run_until_idle()
    assert "stomp-subscription-daily" not in net.broker.model.vhosts["/"].queues
    send(p, "/topic/news", b"4")
    net.run_until_idle()
    assert bodies(a2) == []


def test_prefix_topic_subscription():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/foo*", "1")
    net.run_until_idle()
    for dest in ("/topic/foo", "/topic/foobar", "/topic/foo.baz", "/topic/fo", "/topic/bar.foo"):
        send(p, dest, dest.encode())
    net.run_until_idle()
    assert bodies(a) == [b"/topic/foo", b"/topic/foobar", b"/topic/foo.baz"]


def test_control_destinations():
    net = new_net()
    a, b, p = connected(net), connected(net), connected(net)
    for i in range(3):
        send(p, "/queue/counted", b"%d" % i)
    subscribe(a, "/topic/t.x", "1")
    subscribe(b, "/topic/t.*", "1")
    subscribe(b, "/queue/other", "2")
    net.run_until_idle()
    p.events()
    send(p, "/control/count-msgs/queue/counted", receipt="r1")
    send(p, "/control/count-subscribers/queue/other", receipt="r2")
    send(p, "/control/count-subscribers/topic/t.x", receipt="r3")
    send(p, "/control/count-msgs/queue/none", receipt="r4")
    net.run_until_idle()
    got = {r.headers["receipt-id"]: r.headers for r in p.events() if isinstance(r, Receipt)}
    assert got["r1"]["num-messages"] == "3"
    assert got["r2"]["num-subscribers"] == "1"
    assert got["r3"]["num-subscribers"] == "2"
    assert got["r4"]["num-messages"] == "0"
    send(p, "/control/bogus", receipt="r5")
    net.run_until_idle()
    assert isinstance(p.received[-1], Error)


def test_unknown_destination_is_an_error():
    net = new_net()
    a = connected(net)
    send(a, "/weird/place", b"x")
    net.run_until_idle()
    assert errors(a)[0].headers["message"] == "Invalid destination"
    assert a.server_closed


def test_subscribe_to_temp_queue_and_reply_queue():
    net = new_net()
    c = connected(net)
    subscribe(c, "/temp-queue/mine", "t", receipt="r")
    net.run_until_idle()
    assert [e.headers["receipt-id"] for e in c.events() if isinstance(e, Receipt)] == ["r"]
    send(c, "/temp-queue/mine", b"to myself")
    net.run_until_idle()
    [m] = messages(c)
    assert m.body == b"to myself" and m.headers["destination"] == "/temp-queue/mine"
    other = connected(net)
    subscribe(other, "/reply-queue/does-not-exist", "x")
    net.run_until_idle()
    assert errors(other)[0].headers["message"] == "not_found"


def test_stomp_10_client_without_ids():
    net = new_net()
    c = connected(net, version="1.0")
    c.send(Subscribe({"destination": "/queue/old"}))
    send(c, "/queue/old", b"hi")
    net.run_until_idle()
    [m] = messages(c)
    assert m.headers["subscription"] == "/queue/old"
    c.send(Unsubscribe({"destination": "/queue/old", "receipt": "u"}))
    net.run_until_idle()
    assert c.received[-1].headers["receipt-id"] == "u"
