"""STOMP 1.0/1.1/1.2 behaviour through stomp.py against every server kind (one server per kind)."""

from __future__ import annotations

import os
import time

import pytest
from e2ekit import RawStomp, ack_args, close_quietly, connect, uid, wait_until

pytestmark = pytest.mark.timeout(120)

VERSIONS = ("1.0", "1.1", "1.2")


@pytest.fixture
def clients(server):
    """Factory for stomp.py connections to this module's server; all closed afterwards."""
    made = []

    def make(version: str = "1.2", **kw):
        conn, coll = connect(server.addr, version, **kw)
        made.append(conn)
        return conn, coll

    yield make
    for conn in made:
        close_quietly(conn)


def send_all(conn, dest: str, bodies, coll, **headers) -> None:
    """Send bodies; the last with a receipt, waited for (so the broker has them all)."""
    rid = uid("r")
    for i, body in enumerate(bodies):
        extra = {"receipt": rid} if i == len(bodies) - 1 else {}
        conn.send(dest, body, headers={**headers, **extra})
    coll.wait_receipt(rid)


def subscribe(conn, coll, dest: str, sub_id: str, ack: str = "auto", **headers) -> None:
    rid = uid("r")
    conn.subscribe(dest, id=sub_id, ack=ack, headers={**headers, "receipt": rid})
    coll.wait_receipt(rid)


def count_msgs(conn, coll, queue: str) -> int:
    rid = uid("count")
    conn.send(f"/control/count-msgs/queue/{queue}", "", headers={"receipt": rid})
    coll.wait_receipt(rid)
    frame = next(f for f in coll.receipt_frames if f.headers["receipt-id"] == rid)
    return int(frame.headers["num-messages"])


# -- publish / subscribe ------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_queue_round_trip(clients, version: str) -> None:
    q = uid("q")
    sub, sub_c = clients(version)
    pub, pub_c = clients(version)
    subscribe(sub, sub_c, f"/queue/{q}", "s1")
    bodies = [f"m{i}" for i in range(20)]
    send_all(pub, f"/queue/{q}", bodies, pub_c, **{"x-custom": "yes"})
    frames = sub_c.wait_messages(20)
    assert [f.body for f in frames] == bodies
    h = frames[0].headers
    assert h["destination"] == f"/queue/{q}" and h["subscription"] == "s1"
    assert h["x-custom"] == "yes" and h["message-id"]
    assert ("ack" in h) is False  # auto ack: nothing to acknowledge


@pytest.mark.parametrize("version", VERSIONS)
def test_topic_fans_out_to_every_subscriber(clients, version: str) -> None:
    t = uid("t")
    (a, ac), (b, bc), (pub, pc) = clients(version), clients(version), clients(version)
    subscribe(a, ac, f"/topic/{t}", "a")
    subscribe(b, bc, f"/topic/{t}", "b")
    send_all(pub, f"/topic/{t}", ["x", "y", "z"], pc)
    assert [f.body for f in ac.wait_messages(3)] == ["x", "y", "z"]
    assert [f.body for f in bc.wait_messages(3)] == ["x", "y", "z"]
    assert ac.messages[0].headers["destination"] == f"/topic/{t}"


def test_prefix_topic_subscription(clients) -> None:
    base = uid("pfx")
    sub, sc = clients()
    pub, pc = clients()
    subscribe(sub, sc, f"/topic/{base}*", "p")
    for key, body in ((f"{base}.a", "1"), (f"{base}bar", "2"), (f"x{base}", "no"), (base, "3")):
        send_all(pub, f"/topic/{key}", [body], pc)
    send_all(pub, f"/topic/{base}.z", ["4"], pc)
    assert [f.body for f in sc.wait_messages(4)] == ["1", "2", "3", "4"]
    assert "no" not in sc.bodies()


# -- acknowledgements ---------------------------------------------------------------------------
def leave(conn) -> None:
    """DISCONNECT with a receipt: the broker has processed everything this client sent."""
    conn.disconnect(receipt=uid("bye"))


@pytest.mark.parametrize("version", VERSIONS)
def test_client_ack_is_cumulative_and_unacked_are_redelivered(clients, version: str) -> None:
    q = uid("q")
    pub, pc = clients(version)
    send_all(pub, f"/queue/{q}", [f"m{i}" for i in range(5)], pc)
    first, fc = clients(version)
    subscribe(first, fc, f"/queue/{q}", "c", ack="client")
    frames = fc.wait_messages(5)
    assert count_msgs(pub, pc, q) == 0  # all delivered, none ready
    if version == "1.2":
        assert all("ack" in f.headers for f in frames)
    first.ack(**ack_args(version, frames[2]))  # acknowledges m0..m2
    leave(first)  # m3, m4 go back to the queue
    wait_until(lambda: count_msgs(pub, pc, q) == 2, 5, "2 requeued")
    second, sc = clients(version)
    subscribe(second, sc, f"/queue/{q}", "c2", ack="client")
    frames = sc.wait_messages(2)
    assert [f.body for f in frames] == ["m3", "m4"]
    assert all(f.headers.get("redelivered") == "true" for f in frames)
    second.ack(**ack_args(version, frames[1]))
    leave(second)
    assert count_msgs(pub, pc, q) == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_client_individual_ack(clients, version: str) -> None:
    q = uid("q")
    pub, pc = clients(version)
    send_all(pub, f"/queue/{q}", [f"m{i}" for i in range(5)], pc)
    first, fc = clients(version)
    subscribe(first, fc, f"/queue/{q}", "ci", ack="client-individual")
    frames = fc.wait_messages(5)
    first.ack(**ack_args(version, frames[1]))
    first.ack(**ack_args(version, frames[3]))
    leave(first)
    wait_until(lambda: count_msgs(pub, pc, q) == 3, 5, "3 requeued")
    second, sc = clients(version)
    subscribe(second, sc, f"/queue/{q}", "ci2", ack="client-individual")
    assert [f.body for f in sc.wait_messages(3)] == ["m0", "m2", "m4"]


@pytest.mark.parametrize("version", ["1.1", "1.2"])  # NACK does not exist in STOMP 1.0
def test_nack_requeues(clients, version: str) -> None:
    q = uid("q")
    sub, sc = clients(version)
    pub, pc = clients(version)
    subscribe(sub, sc, f"/queue/{q}", "n", ack="client-individual")
    send_all(pub, f"/queue/{q}", ["only"], pc)
    (frame,) = sc.wait_messages(1)
    assert "redelivered" not in frame.headers
    sub.nack(**ack_args(version, frame))
    again = sc.wait_messages(2)[1]
    assert again.body == "only" and again.headers.get("redelivered") == "true"
    sub.ack(**ack_args(version, again))
    leave(sub)
    assert count_msgs(pub, pc, q) == 0


# -- receipts and transactions ------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_receipts_for_every_command(clients, version: str) -> None:
    q = uid("q")
    conn, c = clients(version)
    subscribe(conn, c, f"/queue/{q}", "r")  # SUBSCRIBE receipt
    conn.send(f"/queue/{q}", "hi", headers={"receipt": "send-1"})
    c.wait_receipt("send-1")
    c.wait_messages(1)
    conn.unsubscribe(id="r", headers={"receipt": "unsub-1"})
    c.wait_receipt("unsub-1")
    conn.begin("tx-r", headers={"receipt": "begin-1"})
    c.wait_receipt("begin-1")
    conn.abort("tx-r", headers={"receipt": "abort-1"})
    c.wait_receipt("abort-1")
    conn.disconnect(receipt="bye-1")  # stomp.py sends it and returns: wait for the broker's answer
    c.wait_receipt("bye-1")


@pytest.mark.parametrize("version", VERSIONS)
def test_transactions_commit_and_abort(clients, version: str) -> None:
    q = uid("q")
    pub, pc = clients(version)
    sub, sc = clients(version)
    subscribe(sub, sc, f"/queue/{q}", "tx", ack="client-individual")
    pub.begin("t1")
    for body in ("a", "b", "c"):
        pub.send(f"/queue/{q}", body, transaction="t1")
    pub.begin("t2")
    pub.send(f"/queue/{q}", "aborted", transaction="t2")
    pub.abort("t2")
    assert count_msgs(pub, pc, q) == 0 and sc.messages == []  # nothing before COMMIT
    pub.commit("t1", headers={"receipt": "c1"})
    pc.wait_receipt("c1")
    frames = sc.wait_messages(3)
    assert [f.body for f in frames] == ["a", "b", "c"]
    # acks inside an aborted transaction are void; inside a committed one they count
    sub.begin("t3")
    for f in frames:
        sub.ack(transaction="t3", **ack_args(version, f))
    sub.abort("t3")
    sub.begin("t4")
    sub.ack(transaction="t4", **ack_args(version, frames[0]))
    sub.commit("t4")
    leave(sub)
    wait_until(lambda: count_msgs(pub, pc, q) == 2, 5, "b and c requeued")
    assert "aborted" not in sc.bodies()


# -- broker features ----------------------------------------------------------------------------
def test_control_count_msgs(clients) -> None:
    q = uid("q")
    conn, c = clients()
    assert count_msgs(conn, c, q) == 0
    send_all(conn, f"/queue/{q}", ["1", "2", "3"], c)
    assert count_msgs(conn, c, q) == 3


def test_ack_timeout_moves_message_to_another_subscriber(clients) -> None:
    q = uid("q")
    pub, pc = clients()
    slow, slc = clients()
    subscribe(slow, slc, f"/queue/{q}", "slow", ack="client", **{"prefetch-count": "1"})
    send_all(pub, f"/queue/{q}", ["job"], pc, **{"ack-timeout": "0.3"})
    (held,) = slc.wait_messages(1)  # never acked
    other, oc = clients()
    subscribe(other, oc, f"/queue/{q}", "other", ack="client")
    t0 = time.monotonic()
    (frame,) = oc.wait_messages(1, timeout=5)
    assert frame.body == "job" and frame.headers.get("redelivered") == "true"
    assert time.monotonic() - t0 < 3
    other.ack(**ack_args("1.2", frame))
    wait_until(lambda: count_msgs(pub, pc, q) == 0, 5, "acked by the other subscriber")


def test_priorities_deliver_highest_first(clients) -> None:
    q = uid("q")
    pub, pc = clients()
    order = [3, 0, 9, 5, 1, 7]
    for p in order:
        pub.send(f"/queue/{q}", f"p{p}", headers={"priority": str(p)})
    send_all(pub, f"/queue/{q}", ["p4"], pc, priority="4")
    sub, sc = clients()
    subscribe(sub, sc, f"/queue/{q}", "prio")
    got = [f.body for f in sc.wait_messages(7)]
    assert got == [f"p{p}" for p in sorted([*order, 4], reverse=True)]


@pytest.mark.parametrize("version", VERSIONS)
def test_ten_megabyte_body(clients, version: str) -> None:
    q = uid("big")
    body = os.urandom(10 * 1024 * 1024)
    sub, sc = clients(version, auto_decode=False)
    pub, pc = clients(version, auto_decode=False)
    subscribe(sub, sc, f"/queue/{q}", "big")
    send_all(pub, f"/queue/{q}", [body], pc)
    (frame,) = sc.wait_messages(1, timeout=30)
    assert frame.body == body


# -- heart-beats (the module's server offers to send every 250 ms, wants a beat every 500 ms) ----------------------------------
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_server_sends_heartbeats(server, version: str) -> None:
    raw = RawStomp(server.addr)
    headers = raw.connect(version, heartbeat="0,200")
    sx, sy = (int(x) for x in headers["heart-beat"].split(","))
    assert sx > 0, headers
    period = max(sx, 200) / 1000
    raw.sock.settimeout(period * 3)
    t0 = time.monotonic()
    beats = 0
    while time.monotonic() - t0 < period * 4.5:
        data = raw.sock.recv(100)
        assert data and data.strip(b"\r\n") == b"", data  # only EOLs: nothing else was asked for
        beats += data.count(b"\n")
    assert beats >= 3
    raw.close()


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_silent_client_is_disconnected(server, version: str) -> None:
    raw = RawStomp(server.addr)
    headers = raw.connect(version, heartbeat="200,0")  # promises a beat every 200 ms, sends none
    sy = int(headers["heart-beat"].split(",")[1])
    assert sy > 0, headers
    raw.sock.settimeout(5)
    t0 = time.monotonic()
    rest = raw.read_until_closed()
    elapsed = time.monotonic() - t0
    assert elapsed < max(200, sy) / 1000 * 4, elapsed
    assert rest.lstrip(b"\r\n") == b"" or rest.lstrip(b"\r\n").startswith(b"ERROR")


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_beating_client_stays_connected(clients, version: str) -> None:
    q = uid("hb")
    # lenient on its side (receive scale 3): this test is about the server keeping it
    conn, c = clients(version, heartbeats=(150, 150), heart_beat_receive_scale=3.0)
    subscribe(conn, c, f"/queue/{q}", "hb")
    time.sleep(2.0)  # several server timeout periods (750 ms) with only heart-beats on the wire
    assert conn.is_connected() and not c.disconnected and c.heartbeat_timeouts == 0
    send_all(conn, f"/queue/{q}", ["still here"], c)
    assert c.wait_messages(1)[0].body == "still here"
