"""Bounded resources before login over real sockets, on every server kind (issue 23 item 4): a
connection that does not finish its handshake within ``--handshake-timeout`` is closed, on every
listener including the TLS ones (a TLS handshake never started); a large frame before login is
refused after a few KB, and twenty connections sending one leave the broker's memory flat; logged
in clients are not affected. Engine-level checks: tests/engine/test_engine_handshake.py."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from e2ekit import ServerProcess, WsStomp, close_quietly, connect, start_server, wait_until
from test_e2e_amqp_load import RawAmqp
from tlskit import Pki, make_pki
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

import amqpproto as A
from amqpproto import spec

pytestmark = pytest.mark.timeout(180)

#: the deadline the broker runs with here (seconds)
DEADLINE = 1.0
#: the memory alarm's high watermark here: only the unfinished-body test comes near it
WATERMARK = 4 << 20
PLAIN = ("stomp", "amqp", "ws")
TLS = ("stomps", "amqps", "wss")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(kind: str, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text("[limits]\nheartbeat = [250, 500]\n")
    srv = start_server(kind, path, "--handshake-timeout", str(DEADLINE), "--memory-high-watermark", str(WATERMARK),
                       "--tls-cert", str(pki.server_cert),
                       "--tls-key", str(pki.server_key), "--amqps", "127.0.0.1:0", "--stomps", "127.0.0.1:0",
                       "--wss", "127.0.0.1:0")
    for protocol in TLS:
        srv.port(protocol)
    try:
        yield srv
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


def seconds_until_closed(sock: socket.socket, limit: float = 15.0) -> float:
    """Read (and drop) what the server sends until it closes; seconds that took."""
    started = time.monotonic()
    sock.settimeout(limit)
    while True:
        try:
            if not sock.recv(65536):
                break
        except ConnectionResetError:
            break
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open for {limit} s") from None
    return time.monotonic() - started


OPENINGS = {
    "stomp": b"CONNECT\naccept-version:1.2\n",  # a CONNECT that never ends
    "amqp": b"AMQP\x00\x00\x09\x01",  # the protocol header, then no start-ok
    "ws": (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"),  # no CONNECT
}


@pytest.mark.parametrize("protocol, say", [(p, False) for p in PLAIN + TLS] + [(p, True) for p in PLAIN],
                         ids=[f"{p}-silent" for p in PLAIN + TLS] + [f"{p}-half-handshake" for p in PLAIN])
def test_a_connection_that_never_logs_in_is_closed_at_the_deadline(server, protocol, say):
    """Silent after the accept (on a TLS listener: the TLS handshake never started), or stopped
    in the middle of the protocol's handshake."""
    with socket.create_connection(("127.0.0.1", server.port(protocol)), timeout=10) as sock:
        if say:
            sock.sendall(OPENINGS[protocol])
        took = seconds_until_closed(sock)
    assert DEADLINE - 0.3 <= took <= DEADLINE + 8  # a WebSocket waits up to 5 s for the Close answer
    wait_until(lambda: any("handshake not finished within 1 s" in line for line in server.lines), 10,
               "the handshake timeout log line")


def test_a_tls_handshake_that_never_finishes_is_closed(server, pki):
    """A TLS client that sends its hello and then nothing more (the TLS handshake stalls)."""
    ctx = pki.client_context(with_cert=False)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    with socket.create_connection(("127.0.0.1", server.port("amqps")), timeout=10) as sock:
        sock.sendall(outgoing.read())  # the ClientHello only
        assert seconds_until_closed(sock) <= DEADLINE + 3


def test_logged_in_clients_outlive_the_deadline(server, pki):
    conn, col = connect(("127.0.0.1", server.port("stomp")), heartbeats=(0, 0))
    params = pika.ConnectionParameters("127.0.0.1", server.port("amqps"), connection_attempts=1, socket_timeout=10,
                                       ssl_options=pika.SSLOptions(pki.client_context(with_cert=False), "localhost"))
    amqp = pika.BlockingConnection(params)
    try:
        time.sleep(DEADLINE * 2)
        conn.send("/queue/hs-e2e", "still here", receipt="r1")
        col.wait_receipt("r1")
        amqp.channel().queue_declare("", exclusive=True)
    finally:
        close_quietly(conn)
        amqp.close()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_large_frames_before_login_are_refused_early_and_memory_stays_flat(server):
    """Twenty connections each sending a 4 MiB STOMP frame before CONNECTED: each is refused
    (ERROR, closed) after the first few KB; the broker's RSS does not grow by what they sent
    (issue 23: 20 frames of 16 MiB took +622 MB)."""
    before = rss(server.proc.pid)
    junk = b"CONNECT\nlogin:guest\npasscode:guest\n\n" + b"x" * (4 << 20)
    socks = [socket.create_connection(("127.0.0.1", server.port("stomp")), timeout=10) for _ in range(20)]
    try:
        for sock in socks:
            try:
                sock.sendall(junk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before we were done: what we want
        grown = rss(server.proc.pid) - before
        for sock in socks:
            assert seconds_until_closed(sock, 10) < 10
    finally:
        for sock in socks:
            sock.close()
    assert grown < 30 * 1024 * 1024, f"RSS grew by {grown / 1e6:.1f} MB"
    with socket.create_connection(("127.0.0.1", server.port("stomp")), timeout=10) as sock:
        sock.sendall(junk[:20_000])
        got = b""
        sock.settimeout(10)
        while chunk := sock.recv(65536):
            got += chunk
        assert got.startswith(b"ERROR\n") and b"8192" in got


def test_a_half_received_amqp_body_sets_the_memory_alarm(server):
    """An unfinished message is memory too: 6 MiB of a 20 MiB body, with nothing queued, pass the
    4 MiB watermark and the publishers are blocked (pika gets connection.blocked); when its sender
    goes, the alarm clears (issue 23: an unfinished 100 MiB body was not counted)."""
    events: list[str] = []
    pub = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port("amqp"), connection_attempts=1,
                                                            socket_timeout=10))
    pub.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
    pub.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
    ch = pub.channel()
    ch.queue_declare("", exclusive=True)
    ch.basic_publish("", "hs-nowhere", b"a publisher, so the alarm blocks it")
    c = RawAmqp(("127.0.0.1", server.port("amqp")), timeout=15)
    try:
        c.send(A.ProtocolHeader())
        c.expect(spec.ConnectionStart)
        c.send(spec.ConnectionStartOk({}, "PLAIN", A.plain_response("guest", "guest"), "en_US"))
        c.send(c.conn.tune_ok(c.expect(spec.ConnectionTune)), spec.ConnectionOpen("/"))
        c.expect(spec.ConnectionOpenOk)
        c.send(spec.ChannelOpen(channel=1))
        c.expect(spec.ChannelOpenOk)
        publish = c.conn.send(spec.BasicPublish(routing_key="hs-nowhere", body=b"u" * (20 << 20), channel=1))
        c.sock.sendall(publish[:6 << 20])
        wait_until(lambda: pub.process_data_events(0.05) or events == ["blocked"], 10, "connection.blocked")
    finally:
        c.close()
    wait_until(lambda: pub.process_data_events(0.05) or events == ["blocked", "unblocked"], 10,
               "connection.unblocked once the unfinished message is gone")
    pub.close()


def test_a_large_websocket_message_before_login_is_a_1009(server):
    """With the `websockets` client: a 20 KB message before the STOMP login is refused with Close
    1009; after the login a 200 KB SEND goes through."""
    url = f"ws://127.0.0.1:{server.port('ws')}/ws"
    with ws_connect(url, subprotocols=["v12.stomp"], open_timeout=10) as ws:
        ws.send("CONNECT\naccept-version:1.2\nhost:/\nx-pad:" + "p" * 20_000 + "\n\n\0")
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=10)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    with ws_connect(url, subprotocols=["v12.stomp"], open_timeout=10, max_size=None) as ws:
        client = WsStomp(ws)
        client.connect()
        client.receipt("SEND", {"destination": "/queue/hs-ws-big"}, b"b" * 200_000)
