"""STOMP session behaviour: receipts, transactions, auth, vhosts, heart-beats, protocol errors,
back-pressure, unknown protocols."""

import pytest
from enginetest_helpers import ack, bodies, connected, errors, messages, new_net, receipts, send, subscribe, unsubscribe

from engine import Close, Config, Limits, User
from engine.model.security import Permission
from stompproto import Abort, Begin, Commit, Connected, Disconnect, Error, Heartbeat, Message, Receipt


def test_receipts_on_every_frame_kind():
    net = new_net()
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client-individual", receipt="sub")
    send(c, "/queue/q", b"x", receipt="send")
    net.run_until_idle()
    [m] = [e for e in c.events() if isinstance(e, Message)]
    ack(c, m, receipt="ack")
    c.send(Begin({"transaction": "t", "receipt": "begin"}))
    c.send(Abort({"transaction": "t", "receipt": "abort"}))
    c.send(Begin({"transaction": "t2", "receipt": "begin2"}))
    c.send(Commit({"transaction": "t2", "receipt": "commit"}))
    unsubscribe(c, "1", receipt="unsub")
    c.send(Disconnect({"receipt": "bye"}))
    net.run_until_idle()
    ids = [r.headers["receipt-id"] for r in c.received if isinstance(r, Receipt)]
    assert ids == ["sub", "send", "ack", "begin", "abort", "begin2", "commit", "unsub", "bye"]
    assert c.server_closed and c.gone


def test_transactions_buffer_until_commit_and_abort_discards():
    net = new_net()
    c, p = connected(net), connected(net)
    subscribe(c, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    p.send(Begin({"transaction": "tx"}))
    send(p, "/queue/q", b"a", transaction="tx")
    send(p, "/queue/q", b"b", transaction="tx")
    send(p, "/queue/q", b"now")
    net.run_until_idle()
    assert bodies(c) == [b"now"]
    p.send(Commit({"transaction": "tx"}))
    net.run_until_idle()
    got = messages(c)
    assert [m.body for m in got] == [b"a", b"b"]
    # transactional acks: aborted ones do not happen
    c.send(Begin({"transaction": "t1"}))
    ack(c, got[0], transaction="t1")
    c.send(Abort({"transaction": "t1"}))
    c.send(Begin({"transaction": "t2"}))
    ack(c, got[1], transaction="t2")
    c.send(Commit({"transaction": "t2"}))
    net.run_until_idle()
    q = net.broker.model.vhosts["/"].queues["q"]
    assert q.unacked_count() == 2  # "now" and "a"
    p.send(Begin({"transaction": "open"}))
    send(p, "/queue/q", b"never", transaction="open")
    net.run_until_idle()
    p.drop()  # connection death aborts open transactions
    net.run_until_idle()
    assert messages(c) == []


def test_unknown_transaction_is_an_error():
    net = new_net()
    c = connected(net)
    send(c, "/queue/q", b"x", transaction="nope")
    net.run_until_idle()
    assert errors(c)[0].headers["message"] == "Bad transaction"
    assert c.server_closed
    d = connected(net)
    d.send(Commit({"transaction": "nope"}))
    net.run_until_idle()
    assert errors(d) and d.server_closed


def test_auth_users_and_guest_loopback_only():
    cfg = Config()
    cfg.users["alice"] = User("alice", "secret")
    net = new_net(cfg)
    assert isinstance(net.connect().stomp_connect({"login": "alice", "passcode": "secret"}), Connected)
    bad = net.connect()
    err = bad.stomp_connect({"login": "alice", "passcode": "wrong"})
    assert isinstance(err, Error) and err.headers["message"] == "Access refused: user 'alice' - invalid credentials"
    net.run_until_idle()
    assert bad.server_closed
    remote_guest = net.connect(peer=("10.1.2.3", 5555))
    err = remote_guest.stomp_connect({"login": "guest", "passcode": "guest"})
    assert isinstance(err, Error) and err.headers["message"] == "Access refused: user 'guest' can only connect via localhost"
    assert err.body == b"user 'guest' can only connect via localhost"
    remote_alice = net.connect(peer=("10.1.2.3", 5556))
    assert isinstance(remote_alice.stomp_connect({"login": "alice", "passcode": "secret"}), Connected)
    v6 = net.connect(peer=("::1", 5557, 0, 0))
    assert isinstance(v6.stomp_connect({"login": "guest", "passcode": "guest"}), Connected)

def test_anonymous_connect_is_refused_by_default():
    """Issue 23.1: a CONNECT without login used to be admitted as guest with no password check."""
    net = new_net()
    err = net.connect().stomp_connect(anonymous=True)
    assert isinstance(err, Error)
    assert err.headers["message"] == "Access refused: no login given and anonymous access is disabled"


def test_anonymous_connect_goes_through_the_normal_login():
    """RabbitMQ's STOMP default_user/default_pass: the configured credentials are checked like a
    login: right password from loopback in; guest from another address out; a changed password out."""
    cfg = Config(anonymous_user="guest", anonymous_password="guest")
    net = new_net(cfg)
    assert isinstance(net.connect().stomp_connect(anonymous=True), Connected)
    remote = net.connect(peer=("192.168.0.9", 1)).stomp_connect(anonymous=True)
    assert isinstance(remote, Error)
    assert remote.headers["message"] == "Access refused: user 'guest' can only connect via localhost"
    sec = net.broker.model.security
    sec.add_user("guest", "changed", b"salt", tags=("administrator",))
    err = net.connect().stomp_connect(anonymous=True)
    assert isinstance(err, Error) and err.headers["message"] == "Access refused: user 'guest' - invalid credentials"


def test_anonymous_config_needs_a_password_and_guest_stays_loopback_only():
    from engine.config_schema import ConfigError, from_mapping

    with pytest.raises(ConfigError, match="anonymous_user needs anonymous_password"):
        from_mapping({"anonymous_user": "guest"})
    # issue 23.3: [users.guest] without loopback_only keeps RabbitMQ's loopback_users default
    cfg = from_mapping({"users": {"guest": {"password": "guest"}, "app": {"password": "pw"}}})
    assert cfg.users["guest"].loopback_only and not cfg.users["app"].loopback_only
    assert not from_mapping({"users": {"guest": {"password": "g", "loopback_only": False}}}).users["guest"].loopback_only
    net = new_net(cfg)
    err = net.connect(peer=("10.1.2.3", 5555)).stomp_connect()
    assert isinstance(err, Error) and err.headers["message"] == "Access refused: user 'guest' can only connect via localhost"
    assert isinstance(net.connect(peer=("10.1.2.3", 5556)).stomp_connect({"login": "app", "passcode": "pw"}), Connected)


def test_vhost_selection_isolates_queues():
    cfg = Config(vhosts=("/", "blue"))
    cfg.users["bob"] = User("bob", "pw", vhosts=("blue",))
    net = new_net(cfg)
    blue = connected(net, headers={"host": "blue"})
    default = connected(net, headers={"host": "/"})
    send(blue, "/queue/q", b"blue")
    send(default, "/queue/q", b"default")
    net.run_until_idle()
    vhosts = net.broker.model.vhosts
    assert vhosts["blue"].queues["q"].count == 1 and vhosts["/"].queues["q"].count == 1
    subscribe(blue, "/queue/q", "1")
    net.run_until_idle()
    assert bodies(blue) == [b"blue"]
    bob_ok = net.connect()
    assert isinstance(bob_ok.stomp_connect({"login": "bob", "passcode": "pw", "host": "blue"}), Connected)
    bob_bad = net.connect()
    assert isinstance(bob_bad.stomp_connect({"login": "bob", "passcode": "pw", "host": "/"}), Error)


def test_unknown_vhost_in_host_header_is_refused():
    """Issue 23.8: a host naming no vhost used to land silently in '/'; RabbitMQ's STOMP adapter
    refuses it ("Virtual host 'x' access denied")."""
    net = new_net()
    c = net.connect()
    err = c.stomp_connect({"host": "unknown-host"})
    assert isinstance(err, Error)
    assert err.headers["message"] == "Access refused: Virtual host 'unknown-host' access denied"
    assert err.body == b"Virtual host 'unknown-host' access denied"
    net.run_until_idle()
    assert c.server_closed and "unknown-host" not in net.broker.model.vhosts
    # a 1.0 CONNECT without host still lands in the default vhost
    assert isinstance(net.connect().stomp_connect({"accept-version": "1.0"}, version="1.0"), Connected)


def test_heartbeat_timeout_closes_and_requeues():
    net = new_net()
    c = net.connect(auto_heartbeat=False)
    frame = c.stomp_connect({"heart-beat": "1000,1000"})
    assert frame.headers["heart-beat"] == "1000,1000"  # granted as asked (RabbitMQ does the same)
    subscribe(c, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    p = connected(net)
    send(p, "/queue/q", b"x")
    net.run_until_idle()
    assert bodies(c) == [b"x"]
    net.advance(1.4)  # negotiated 1 s from the client, times grace 1.5 = 1.5 s
    assert not c.server_closed
    net.advance(0.2)
    assert c.server_closed
    q = net.broker.model.vhosts["/"].queues["q"]
    assert q.count == 1 and q.ready_entries()[0].count == 1


def test_heartbeats_keep_connection_alive_and_broker_sends_them():
    net = new_net()
    c = connected(net, headers={"heart-beat": "5000,5000"})
    net.advance(60)
    assert not c.server_closed
    beats = [e for e in c.received if isinstance(e, Heartbeat)]
    assert 11 <= len(beats) <= 13  # the client asked for one every 5 s
    assert net.broker.get_timer() is not None


@pytest.mark.parametrize(
    ("asked", "granted"),
    [("0,0", "0,0"), ("500,0", "0,2000"), ("0,500", "3000,0"), ("5000,7000", "7000,5000")],
)
def test_heartbeat_grant_is_the_request_floored_by_the_limits(asked, granted):
    net = new_net(Config(limits=Limits(heartbeat=(3000, 2000))))
    c = net.connect()
    assert c.stomp_connect({"heart-beat": asked}).headers["heart-beat"] == granted


def test_bad_input_from_one_client_does_not_affect_another():
    net = new_net()
    good, bad = connected(net), connected(net)
    subscribe(good, "/queue/q", "1", ack="client-individual")
    subscribe(bad, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    p = connected(net)
    send(p, "/queue/q", b"1")
    send(p, "/queue/q", b"2")
    net.run_until_idle()
    [mb] = messages(bad)
    bad.send_raw(b"GARBAGE\n\n\x00")
    net.run_until_idle()
    assert bad.server_closed and errors(bad)
    got = messages(good)
    assert [m.body for m in got] == [b"1", mb.body]  # bad's unacked message moved over
    ack(good, got[-1], receipt="fine")
    net.run_until_idle()
    assert receipts(good)[0].headers["receipt-id"] == "fine"


def test_frame_before_connect_and_oversized_frame():
    cfg = Config(limits=Limits(max_body_size=100, max_frame_size=1000))
    net = new_net(cfg)
    c = net.connect()
    c.send_raw(b"SEND\ndestination:/queue/q\n\nx\x00")  # the client codec would refuse it
    net.run_until_idle()
    assert c.server_closed and errors(c)
    d = connected(net)
    send(d, "/queue/q", b"y" * 500)
    net.run_until_idle()
    assert d.server_closed and errors(d)


def test_unknown_protocol_is_closed():
    net = new_net()
    net.broker.connection_made(99, "gopher", ("127.0.0.1", 1), net.now)
    assert net.broker.drain() == [Close(99)]


def test_back_pressure_stops_delivery_to_slow_consumer():
    cfg = Config(limits=Limits(max_outbound_buffer=2000))
    net = new_net(cfg)
    slow = connected(net)
    fast = connected(net)
    subscribe(slow, "/queue/q", "1")  # auto ack too
    net.run_until_idle()
    slow.stop_reading()
    p = connected(net)
    for _ in range(200):
        send(p, "/queue/q", b"x" * 100)
    net.run_until_idle()
    assert not slow.paused  # still read, so its ACKs would arrive; only deliveries stopped
    assert slow.unread < 2000 + 400
    subscribe(fast, "/queue/q", "1")
    net.run_until_idle()
    n_fast = len(messages(fast))
    slow.start_reading()
    net.run_until_idle()
    n_slow = len(messages(slow))
    assert not slow.paused
    assert n_fast + n_slow == 200
    assert n_fast > 150


def test_blocked_consumer_acks_are_still_read():
    """A consumer over its outbound limit gets no deliveries, but its ACKs are read and applied."""
    net = new_net(Config(limits=Limits(max_outbound_buffer=2000)))
    slow = connected(net)
    subscribe(slow, "/queue/q", "1", ack="client-individual")
    p = connected(net)
    send(p, "/queue/q", b"first")
    net.run_until_idle()
    (first,) = messages(slow)
    slow.stop_reading()
    for _ in range(100):
        send(p, "/queue/q", b"x" * 100)
    net.run_until_idle()
    q = net.broker.model.vhosts["/"].queues["q"]
    assert q.count > 50 and q.count + q.unacked_count() == 101  # blocked: most wait in the queue
    ack(slow, first)
    net.run_until_idle()
    assert q.count + q.unacked_count() == 100  # the ACK was read and applied while still blocked
    assert not slow.paused


def test_client_that_never_reads_its_receipts_is_paused():
    net = new_net(Config(limits=Limits(max_outbound_buffer=2000)))
    c = connected(net)
    c.stop_reading()
    for i in range(400):  # one read per frame, so the pause can take effect between reads
        send(c, "/queue/r", b"x", receipt=f"r{i}")
        net.run_until_idle()
    assert c.paused
    assert c.unread <= 2 * 2000 + 200  # replies stop once twice the limit is buffered
    c.start_reading()
    net.run_until_idle()
    assert not c.paused and len(receipts(c)) == 400


def test_disconnect_frame_requeues_and_closes():
    net = new_net()
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client")
    send(c, "/queue/q", b"x")
    net.run_until_idle()
    assert bodies(c) == [b"x"]
    c.send(Disconnect({}))
    net.run_until_idle()
    assert c.server_closed
    assert net.broker.model.vhosts["/"].queues["q"].count == 1


def test_bug_in_session_code_closes_only_that_connection(monkeypatch):
    from engine.stomp.session import _HANDLERS

    def boom(self, frame):
        raise RuntimeError("bug")

    net = new_net(strict=False)
    victim, bystander = connected(net), connected(net)
    subscribe(bystander, "/queue/q", "1")
    net.run_until_idle()
    monkeypatch.setitem(_HANDLERS, Begin, boom)
    victim.send(Begin({"transaction": "t"}))
    net.run_until_idle()
    assert victim.server_closed
    assert isinstance(net.broker.internal_errors[-1], RuntimeError)
    assert errors(victim)[0].headers["message"] == "internal error"
    p = connected(net)
    send(p, "/queue/q", b"still works")
    net.run_until_idle()
    assert bodies(bystander) == [b"still works"]


def test_blank_passwords_are_refused_everywhere():
    """Issue 23.8: RabbitMQ refuses blank passwords: when a user is created (API, definitions) and
    at login, whatever the stored hash says."""
    from engine.definitions import import_definitions
    from engine.model import PreconditionFailed
    from engine.model.security import UserRecord, hash_password

    net = new_net()
    sec = net.broker.model.security
    with pytest.raises(PreconditionFailed, match="must not be blank"):
        sec.add_user("blank", "", b"salt")
    blank = {"name": "blank", "password_hash": hash_password("", b"salt"), "tags": []}
    with pytest.raises(PreconditionFailed, match="must not be blank"):
        import_definitions(net.broker.model, {"users": [blank]})
    assert "blank" not in sec.users
    sec.put_user(UserRecord.from_json(blank))  # say a store written by an older version holds one
    sec.set_permissions(Permission("blank", "/"))
    err = net.connect().stomp_connect({"login": "blank", "passcode": ""})
    assert isinstance(err, Error) and err.headers["message"] == "Access refused: user 'blank' - invalid credentials"
    assert sec.authenticate("blank", "") is None
