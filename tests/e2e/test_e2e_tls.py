"""TLS on every listener of every server kind with real clients: pika (AMQPS), stomp.py (STOMP over
TLS) and websockets (WSS), against a throwaway CA made here; with client-certificate verification on,
a client without a certificate is refused during the handshake and nothing else is harmed."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
import stomp
from e2ekit import Collector, WsStomp, close_quietly, uid
from tlskit import Pki, make_pki
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect as ws_connect

import servers
from engine import Config
from servers._driver import Listener
from servers.tls import TlsOptionsError, make_ssl_context

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_listeners(ctx: ssl.SSLContext) -> list[Listener]:
    return [Listener("amqps", "127.0.0.1", 0, ctx), Listener("stomps", "127.0.0.1", 0, ctx),
            Listener("wss", "127.0.0.1", 0, ctx), Listener("amqp", "127.0.0.1", 0)]


@pytest.fixture(scope="module", params=[False, True], ids=["server-auth", "verify-peer"])
def srv(request: pytest.FixtureRequest, kind: str, pki: Pki) -> Iterator[tuple[servers.Running, bool]]:
    verify = request.param
    ctx = make_ssl_context(str(pki.server_cert), str(pki.server_key), str(pki.ca), verify_peer=verify)
    with servers.running(kind, tls_listeners(ctx), config=Config()) as running:
        yield running, verify


def amqps_params(running: servers.Running, ctx: ssl.SSLContext) -> pika.ConnectionParameters:
    host, port = running.address("amqps")
    return pika.ConnectionParameters(host, port, ssl_options=pika.SSLOptions(ctx, "localhost"),
                                     connection_attempts=1, socket_timeout=10)


def test_amqps_round_trip(srv, pki):
    running, _ = srv
    conn = pika.BlockingConnection(amqps_params(running, pki.client_context()))
    try:
        ch = conn.channel()
        q = uid("tls")
        ch.queue_declare(q, auto_delete=True)
        body = b"x" * 300_000  # many TLS records, both ways
        ch.confirm_delivery()
        ch.basic_publish("", q, body)
        for _ in range(500):
            method, _, got = ch.basic_get(q, auto_ack=True)
            if method is not None:
                break
        assert got == body
    finally:
        conn.close()


def test_stomp_over_tls_round_trip(srv, pki):
    running, _ = srv
    host, port = running.address("stomps")
    conn = stomp.Connection([(host, port)], heartbeats=(0, 0), auto_content_length=True, vhost="/")
    conn.set_ssl([(host, port)], key_file=str(pki.client_key), cert_file=str(pki.client_cert),
                 ca_certs=str(pki.ca))
    col = Collector()
    conn.set_listener("c", col)
    conn.connect("guest", "guest", wait=True)
    try:
        q = f"/queue/{uid('stls')}"
        conn.subscribe(q, id="s")
        conn.send(q, "over tls", receipt="r")
        col.wait_receipt("r")
        assert col.wait_messages(1)[0].body == "over tls"
    finally:
        close_quietly(conn)


def test_wss_round_trip(srv, pki):
    running, _ = srv
    host, port = running.address("wss")
    with ws_connect(f"wss://localhost:{port}/ws", subprotocols=["v12.stomp"], ssl=pki.client_context(),
                    open_timeout=10) as ws:
        c = WsStomp(ws)
        c.send("CONNECT", {"accept-version": "1.2", "host": "/", "heart-beat": "0,0", "login": "guest", "passcode": "guest"})
        c.expect("CONNECTED")
        q = f"/queue/{uid('wss')}"
        c.send("SUBSCRIBE", {"destination": q, "id": "s"})
        c.send("SEND", {"destination": q}, b"secure")
        _, body = c.expect("MESSAGE")
        assert body == b"secure"


def test_a_client_without_a_certificate(srv, pki):
    """Refused when verification is on (the handshake fails: the client sees the alert), welcome
    when it is off; the plain listener keeps working either way."""
    running, verify = srv
    if verify:
        with pytest.raises((pika.exceptions.AMQPConnectionError, ssl.SSLError, ConnectionError)):
            pika.BlockingConnection(amqps_params(running, pki.client_context(with_cert=False)))
        host, port = running.address("wss")
        # TLS 1.3 checks the client's certificate after the client's side of the handshake: the
        # client sees the alert or the close while it reads the HTTP answer
        with pytest.raises((ssl.SSLError, OSError, WebSocketException)):
            with ws_connect(f"wss://localhost:{port}/ws", ssl=pki.client_context(with_cert=False),
                            open_timeout=10) as ws:
                ws.recv(timeout=10)
    else:
        conn = pika.BlockingConnection(amqps_params(running, pki.client_context(with_cert=False)))
        conn.close()
    host, port = running.address("amqp")
    plain = pika.BlockingConnection(pika.ConnectionParameters(host, port, connection_attempts=1))
    plain.channel().queue_declare("", exclusive=True)
    plain.close()


def test_plain_client_on_a_tls_port_is_closed(srv):
    import socket

    running, _ = srv
    with socket.create_connection(running.address("amqps"), timeout=10) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        s.settimeout(10)
        got = b""
        while True:  # an alert at most, then EOF
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        assert not got.startswith(b"AMQP")


def test_bad_options_are_reported(pki, tmp_path):
    with pytest.raises(TlsOptionsError, match="cannot load the TLS certificate"):
        make_ssl_context(str(tmp_path / "missing.pem"), None)
    with pytest.raises(TlsOptionsError, match="needs a CA bundle"):
        make_ssl_context(str(pki.server_cert), str(pki.server_key), None, verify_peer=True)


def test_the_cli_serves_tls_and_loads_definitions(kind, pki, tmp_path):
    """``sansmq serve`` with --tls-* from the command line, [tls] and definitions = from the config
    file: AMQPS on its own port, a user of the definitions file logs in over it."""
    import json

    from e2ekit import start_server

    from engine.model.security import hash_password

    definitions = tmp_path / "defs.json"
    definitions.write_text(json.dumps({
        "users": [{"name": "tls-user", "password_hash": hash_password("pw", b"salt"[:4]),
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"]}],
        "vhosts": [{"name": "/"}],
        "permissions": [{"user": "tls-user", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
        "parameters": [{"vhost": "/", "component": "shovel", "name": "s", "value": {}}],
    }))
    config = tmp_path / "sansmq.toml"
    config.write_text(f'definitions = "{definitions}"\n[tls]\nkey = "{pki.server_key}"\nca = "{pki.ca}"\n')
    srv = start_server(kind, config, "--tls-cert", str(pki.server_cert), "--tls-verify-peer",
                       "--amqps", "127.0.0.1:0", "--stomps", "127.0.0.1:0", "--wss", "127.0.0.1:0")
    try:
        port = srv.port("amqps")
        srv.port("stomps") and srv.port("wss")
        params = pika.ConnectionParameters("127.0.0.1", port, credentials=pika.PlainCredentials("tls-user", "pw"),
                                           ssl_options=pika.SSLOptions(pki.client_context(), "localhost"),
                                           connection_attempts=1, socket_timeout=10)
        conn = pika.BlockingConnection(params)
        conn.channel().queue_declare("", exclusive=True)
        conn.close()
        assert any("parameters: 1 entries ignored" in line for line in srv.lines)
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def test_the_cli_refuses_unusable_tls_options(tmp_path):
    import subprocess
    import sys

    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servers", "serve", "--check-config", *args],
                              capture_output=True, text=True, timeout=60)

    out = serve("--tls-cert", str(tmp_path / "nope.pem"))
    assert out.returncode == 2 and "cannot load the TLS certificate" in out.stderr
    out = serve("--amqps", "127.0.0.1:5671")
    assert out.returncode == 2 and "--amqps needs a certificate" in out.stderr
    out = serve("--tls-verify-peer")
    assert out.returncode == 2 and "--tls-verify-peer needs --tls-cert" in out.stderr
