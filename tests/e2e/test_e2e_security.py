"""Issue 23, who may log in and from where, on a real `sansmq serve` of each server kind: stomp.py,
pika and `websockets` over real sockets, from loopback and from the machine's other address.

Two brokers per server kind: one with the defaults (no anonymous STOMP login, no WebSocket
compression), one configured as an operator who opens things up would (guest listed in the config
file without ``loopback_only``, an anonymous STOMP login, an Origin allow-list, compression on),
listening on 0.0.0.0 so that the non-loopback checks meet a real non-loopback peer."""

from __future__ import annotations

import base64
import json
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import stomp
from e2ekit import (
    BASE_CONFIG,
    Collector,
    RawStomp,
    ServerProcess,
    WsStomp,
    close_quietly,
    fresh_data_dir,
    uid,
    wait_until,
)
from pika.exceptions import ProbableAccessDeniedError, ProbableAuthenticationError
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from engine.model.security import DEFAULT_HASHING, hash_password
from servers.management import OPS_EPHEMERAL

pytestmark = pytest.mark.timeout(120)

OPEN_CONFIG = """
anonymous_user = "guest"
anonymous_password = "guest"

[users.guest]
password = "guest"

[users.app]
password = "app-pw"

[websocket]
allowed_origins = ["https://app.example"]
compress = true
""" + BASE_CONFIG


def outward_address() -> str | None:
    """This machine's address on its default route (not loopback), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # no packet is sent: this only picks the route
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def serve(kind: str, config: str, tmp: Path, host: str, *extra: str) -> ServerProcess:
    path = tmp / "sansmq.toml"
    path.write_text(config)
    cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", kind, "--stomp", f"{host}:0",
           "--ws", f"{host}:0", "--amqp", f"{host}:0", "--data", fresh_data_dir(), "--config", str(path), *extra]
    return ServerProcess(cmd, kind)


@pytest.fixture(scope="module")
def default_srv(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = BASE_CONFIG + "max_message_size = 4096\n"  # under [limits]: a 406 is cheap to provoke
    srv = serve(kind, config, tmp_path_factory.mktemp("default"), "127.0.0.1")
    yield srv
    assert srv.terminate() == 0, srv.lines[-20:]


@pytest.fixture(scope="module")
def open_srv(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = serve(kind, OPEN_CONFIG, tmp_path_factory.mktemp("open"), "0.0.0.0")
    yield srv
    assert srv.terminate() == 0, srv.lines[-20:]


@pytest.fixture(scope="module")
def outward() -> str:
    addr = outward_address()
    if addr is None:  # the engine tests cover the peer check with a fake peer address
        pytest.skip("this machine has no non-loopback address to connect from")
    return addr


def stomp_login(host: str, port: int, *creds: str, vhost: str | None = "/") -> tuple[stomp.Connection12, Collector]:
    """stomp.py's CONNECT (``creds``: login and passcode, or none at all); raises on refusal."""
    conn = stomp.Connection12([(host, port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=5,
                              **({"vhost": vhost} if vhost else {}))
    coll = Collector()
    conn.set_listener("c", coll)
    conn.connect(*creds, wait=True)
    return conn, coll


def stomp_refused(host: str, port: int, *creds: str, vhost: str | None = "/") -> str:
    """The ERROR frame's message header of a refused stomp.py CONNECT."""
    conn = stomp.Connection12([(host, port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=5,
                              **({"vhost": vhost} if vhost else {}))
    coll = Collector()
    conn.set_listener("c", coll)
    try:
        with pytest.raises(stomp.exception.ConnectFailedException):
            conn.connect(*creds, wait=True)
        coll.wait(lambda: coll.errors, 5, "the ERROR frame")
        return str(coll.errors[0].headers["message"])
    finally:
        close_quietly(conn)


def ws_stomp(url: str, headers: dict[str, str], **kw: object) -> tuple[str, dict[str, str]]:
    """One STOMP CONNECT over `websockets`: (the answer's command, its headers)."""
    with ws_connect(url, subprotocols=["v12.stomp"], open_timeout=10, **kw) as ws:  # type: ignore[arg-type]
        c = WsStomp(ws)
        c.send("CONNECT", {"accept-version": "1.2", "heart-beat": "0,0", **headers})
        command, got, _ = c.read_frame()
        return command, got


# -- defaults ---------------------------------------------------------------------------------------------
def test_stomp_without_login_is_refused_by_default(default_srv: ServerProcess) -> None:
    """Issue 23.1: a CONNECT without login used to be admitted as guest, no password asked."""
    host, port = default_srv.addr
    assert stomp_refused(host, port) == "Access refused: no login given and anonymous access is disabled"
    command, headers = ws_stomp(f"ws://127.0.0.1:{default_srv.port('ws')}/ws", {"host": "/"})
    assert command == "ERROR" and headers["message"].endswith("anonymous access is disabled")
    conn, _ = stomp_login(host, port, "guest", "guest")  # a login still works
    close_quietly(conn)
    assert any("authentication failed using anonymous" in line for line in default_srv.lines)


def test_stomp_host_naming_an_unknown_vhost_is_refused(default_srv: ServerProcess) -> None:
    """Issue 23.8: stomp.py's default host header (the broker's address) used to land in '/';
    RabbitMQ's STOMP adapter maps host to the vhost and refuses one that does not exist."""
    host, port = default_srv.addr
    assert stomp_refused(host, port, "guest", "guest", vhost=None) == \
        "Access refused: Virtual host '127.0.0.1' access denied"
    command, headers = ws_stomp(f"ws://127.0.0.1:{default_srv.port('ws')}/ws",
                                {"host": "nowhere", "login": "guest", "passcode": "guest"})
    assert command == "ERROR" and headers["message"] == "Access refused: Virtual host 'nowhere' access denied"


def test_websocket_compression_is_off_by_default(default_srv: ServerProcess) -> None:
    """Issue 23.8: permessage-deflate was always accepted (the `websockets` client offers it)."""
    with ws_connect(f"ws://127.0.0.1:{default_srv.port('ws')}/ws", subprotocols=["v12.stomp"],
                    open_timeout=10) as ws:
        assert ws.response is not None and "Sec-WebSocket-Extensions" not in ws.response.headers
        assert ws.protocol.extensions == []


# -- an opened-up configuration ---------------------------------------------------------------------------
def test_anonymous_login_is_a_real_login(open_srv: ServerProcess, outward: str) -> None:
    """anonymous_user/anonymous_password log in as RabbitMQ's default_user/default_pass: from
    loopback as guest; from another address refused (guest is loopback-only)."""
    port = open_srv.port("stomp")
    conn, coll = stomp_login("127.0.0.1", port)
    q = f"/queue/{uid('anon')}"
    conn.subscribe(q, "1")
    conn.send(q, "hello", receipt="r1")
    assert [m.body for m in coll.wait_messages(1)] == ["hello"]
    close_quietly(conn)
    assert stomp_refused(outward, port) == "Access refused: user 'guest' can only connect via localhost"
    ws_port = open_srv.port("ws")
    command, _ = ws_stomp(f"ws://127.0.0.1:{ws_port}/ws", {"host": "/"})
    assert command == "CONNECTED"
    command, headers = ws_stomp(f"ws://{outward}:{ws_port}/ws", {"host": "/"})
    assert command == "ERROR" and headers["message"].endswith("can only connect via localhost")


def test_guest_in_the_config_file_stays_loopback_only(open_srv: ServerProcess, outward: str) -> None:
    """Issue 23.3: ``[users.guest]`` without ``loopback_only`` used to let guest in from anywhere."""
    assert stomp_refused(outward, open_srv.port("stomp"), "guest", "guest") == \
        "Access refused: user 'guest' can only connect via localhost"
    params = pika.ConnectionParameters(outward, open_srv.port("amqp"), connection_attempts=1, socket_timeout=10,
                                       credentials=pika.PlainCredentials("guest", "guest"))
    with pytest.raises((ProbableAccessDeniedError, ProbableAuthenticationError)):
        pika.BlockingConnection(params)
    # another config user is not loopback-only
    conn, _ = stomp_login(outward, open_srv.port("stomp"), "app", "app-pw")
    close_quietly(conn)


def test_websocket_origin_allow_list(open_srv: ServerProcess) -> None:
    """Issue 23.8: a page of another site could use the WebSocket listener (and a loopback-only
    guest through the visitor's browser); with ``allowed_origins`` it gets 403."""
    url = f"ws://127.0.0.1:{open_srv.port('ws')}/ws"
    with pytest.raises(InvalidStatus) as refused:
        ws_stomp(url, {"host": "/"}, origin="https://evil.example")
    assert refused.value.response.status_code == 403
    assert ws_stomp(url, {"host": "/"}, origin="https://app.example")[0] == "CONNECTED"
    assert ws_stomp(url, {"host": "/"})[0] == "CONNECTED"  # no Origin: not a browser


def test_websocket_compression_when_configured(open_srv: ServerProcess) -> None:
    with ws_connect(f"ws://127.0.0.1:{open_srv.port('ws')}/ws", subprotocols=["v12.stomp"], open_timeout=10) as ws:
        assert ws.response is not None
        assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")


# -- blank passwords ----------------------------------------------------------------------------------------
def api(srv: ServerProcess, method: str, path: str, body: object = None) -> int:
    """The management API's status for one request as guest."""
    data = json.dumps(body).encode() if body is not None else None
    rq = urllib.request.Request(f"http://127.0.0.1:{srv.port('http')}{path}", data=data, method=method, headers={
        "Content-Type": "application/json", "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    try:
        with urllib.request.urlopen(rq, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_blank_passwords_are_refused(default_srv: ServerProcess) -> None:
    """Issue 23.8: a user could be given a blank password (RabbitMQ refuses them), through the API
    (a password or the hash of a blank one) or a definitions import."""
    blank_hash = hash_password("", b"salt")
    assert api(default_srv, "PUT", "/api/users/blank", {"password": "", "tags": ""}) == 400
    assert api(default_srv, "PUT", "/api/users/blank", {"password_hash": blank_hash, "tags": ""}) == 400
    assert api(default_srv, "POST", "/api/definitions", {"users": [
        {"name": "blank", "password_hash": blank_hash, "hashing_algorithm": DEFAULT_HASHING, "tags": []}]}) == 400
    assert api(default_srv, "GET", "/api/users/blank") == 404
    assert api(default_srv, "PUT", "/api/users/not-blank", {"password": "pw", "tags": ""}) == 201
    assert api(default_srv, "DELETE", "/api/users/not-blank") == 204


# -- the log ------------------------------------------------------------------------------------------------
def test_a_login_name_cannot_forge_a_log_line(default_srv: ServerProcess) -> None:
    """Issue 23.8: a login with a newline (STOMP 1.2 escapes it as \\n in the header) wrote a line
    of its own in the text format."""
    forged = "2026-11-26T00:00:00.000Z INFO    sansmq.engine: connection 1: user 'admin' authenticated"
    raw = RawStomp(default_srv.addr)
    raw.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": "x\\n" + forged, "passcode": "p"})
    assert raw.read_frame()[0] == "ERROR"
    raw.close()
    wait_until(lambda: any("no such user 'x" in ln for ln in default_srv.lines), 10, "the refusal line")
    assert not any(ln.startswith(forged[:20]) for ln in default_srv.lines)
    assert any(f"user 'x\\n{forged}' authentication failed" in ln for ln in default_srv.lines)


def test_channel_errors_and_refused_connections_are_logged_with_who_and_where(default_srv: ServerProcess) -> None:
    """Issue 23, operator's view: 403, 404, 405 and 406 (an oversized message too) closed the channel
    without a line an operator sees; a refused connection (unknown vhost) likewise."""
    port = default_srv.port("amqp")
    params = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=10,
                                       credentials=pika.PlainCredentials("guest", "guest"))
    owner = pika.BlockingConnection(params)
    locked = uid("locked")
    owner.channel().queue_declare(locked, exclusive=True)
    conn = pika.BlockingConnection(params)
    try:
        for code, act in (
            (404, lambda ch: ch.basic_consume(uid("missing"), lambda *a: None)),
            (403, lambda ch: ch.exchange_declare("amq.mine", "direct")),
            (405, lambda ch: ch.basic_consume(locked, lambda *a: None)),
            (406, lambda ch: (ch.basic_publish("", "q", b"x" * 5000), ch.basic_qos(prefetch_count=1))),
        ):
            ch = conn.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                act(ch)
            assert closed.value.reply_code == code
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", port, virtual_host="no-such-vhost", connection_attempts=1, socket_timeout=10,
                credentials=pika.PlainCredentials("guest", "guest")))
    finally:
        conn.close()
        owner.close()

    def warned(what: str) -> list[str]:
        return [ln for ln in default_srv.lines if " WARNING " in ln and what in ln]

    for code, name in ((404, "NOT_FOUND"), (403, "ACCESS_REFUSED"), (405, "RESOURCE_LOCKED"),
                       (406, "PRECONDITION_FAILED")):
        lines = wait_until(lambda code=code, name=name: warned(f": {code} {name} - "), 10, f"the {code} line")
        assert "channel error on connection" in lines[0] and "vhost: '/', user: 'guest'), channel" in lines[0]
        assert ", amqp, " in lines[0] and "(127.0.0.1:" in lines[0]
    assert "message size 5000 is larger than" in wait_until(lambda: warned(": 406 PRECONDITION_FAILED"), 10)[0]
    refused = wait_until(lambda: warned("no-such-vhost"), 10, "the refused connection")
    assert "error on connection" in refused[0] and "user: 'guest'" in refused[0] and "530 NOT_ALLOWED" in refused[0]


# -- limits and the audit trail ------------------------------------------------------------------------------
def api_get(srv: ServerProcess, path: str) -> object:
    rq = urllib.request.Request(f"http://127.0.0.1:{srv.port('http')}{path}", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(rq, timeout=10) as resp:
        return json.loads(resp.read())


def test_limits_through_the_api_enforced_on_amqp_and_stomp_and_audited(default_srv: ServerProcess) -> None:
    """Issue 23.8: RabbitMQ's vhost and user limits, set through /api/vhost-limits and /api/user-limits,
    refuse pika and stomp.py with RabbitMQ's errors; every change is an audit line naming who and
    from where (issue 23, operator's view)."""
    vhost, user = uid("limited"), uid("capped")
    assert api(default_srv, "PUT", f"/api/vhosts/{vhost}", {}) == 201
    assert api(default_srv, "PUT", f"/api/permissions/{vhost}/guest", {"configure": ".*", "write": ".*",
                                                                       "read": ".*"}) == 201
    assert api(default_srv, "PUT", f"/api/users/{user}", {"password": "pw", "tags": ""}) == 201
    assert api(default_srv, "PUT", f"/api/permissions/%2F/{user}", {"configure": ".*", "write": ".*",
                                                                    "read": ".*"}) == 201
    assert api(default_srv, "PUT", f"/api/vhost-limits/{vhost}/max-connections", {"value": 1}) == 204
    assert api(default_srv, "PUT", f"/api/vhost-limits/{vhost}/max-queues", {"value": 1}) == 204
    assert api(default_srv, "PUT", f"/api/vhost-limits/{vhost}/max-sessions", {"value": 1}) == 400
    assert api(default_srv, "PUT", f"/api/user-limits/{user}/max-channels", {"value": 1}) == 204
    assert api_get(default_srv, f"/api/vhost-limits/{vhost}") == [
        {"vhost": vhost, "value": {"max-connections": 1, "max-queues": 1}}]
    assert api_get(default_srv, f"/api/user-limits/{user}") == [{"user": user, "value": {"max-channels": 1}}]
    assert api_get(default_srv, f"/api/users/{user}")["limits"] == {"max-channels": 1}  # type: ignore[index]

    def params(login: str, password: str, virtual_host: str) -> pika.ConnectionParameters:
        return pika.ConnectionParameters("127.0.0.1", default_srv.port("amqp"), virtual_host=virtual_host,
                                         connection_attempts=1, socket_timeout=10,
                                         credentials=pika.PlainCredentials(login, password))

    first = pika.BlockingConnection(params("guest", "guest", vhost))
    capped = pika.BlockingConnection(params(user, "pw", "/"))
    try:
        ch = first.channel()
        ch.queue_declare("one")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as full:
            ch.queue_declare("two")
        assert full.value.reply_code == 406
        assert full.value.reply_text == (f"PRECONDITION_FAILED - cannot declare queue 'two': queue limit in vhost "
                                         f"'{vhost}' (1) is reached")
        with pytest.raises(ProbableAccessDeniedError):
            pika.BlockingConnection(params("guest", "guest", vhost))
        assert stomp_refused(*default_srv.addr, "guest", "guest", vhost=vhost) == \
            "Access refused: Connection refused: vhost connection limit reached"
        capped.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as no_more:
            capped.channel()
        assert no_more.value.reply_code == 530 and "maximum allowed user limit of (1)" in no_more.value.reply_text
    finally:
        first.close()
        if capped.is_open:
            capped.close()
    assert api(default_srv, "DELETE", f"/api/vhost-limits/{vhost}/max-connections") == 204
    assert api(default_srv, "DELETE", f"/api/vhost-limits/{vhost}/max-connections") == 404
    assert api(default_srv, "PUT", f"/api/policies/{vhost}/cap", {"pattern": ".*", "definition": {"max-length": 5}}) \
        == 201
    assert api(default_srv, "PUT", f"/api/topic-permissions/{vhost}/guest", {"exchange": "amq.topic", "write": ".*",
                                                                             "read": ".*"}) == 201
    assert api(default_srv, "DELETE", f"/api/policies/{vhost}/cap") == 204
    assert api(default_srv, "DELETE", f"/api/vhosts/{vhost}") == 204
    assert api(default_srv, "DELETE", f"/api/users/{user}") == 204

    def audit(what: str) -> str:
        found = wait_until(lambda: [ln for ln in default_srv.lines if "sansmq.audit: audit: user 'guest' from 127.0.0.1"
                                    in ln and what in ln], 10, what)
        return str(found[0])

    assert audit(f"created vhost '{vhost}' through the management API")
    assert audit(f"created permissions of user 'guest' in vhost '{vhost}'")
    assert audit(f"created user '{user}'")
    assert audit(f"changed limit 'max-connections' of vhost '{vhost}'")
    assert audit(f"changed limit 'max-channels' of user '{user}'")
    assert audit(f"deleted limit 'max-connections' of vhost '{vhost}'")
    assert audit(f"created policy 'cap' in vhost '{vhost}'") and audit(f"deleted policy 'cap' in vhost '{vhost}'")
    assert audit(f"created topic permissions of user 'guest' in vhost '{vhost}'")
    assert audit(f"deleted vhost '{vhost}'") and audit(f"deleted user '{user}'")
    assert not any("max-sessions" in ln and "audit:" in ln for ln in default_srv.lines)  # refused: no change


def test_a_definitions_import_is_audited(default_srv: ServerProcess) -> None:
    user = uid("imported")
    doc = {"users": [{"name": user, "password_hash": hash_password("pw", b"salt"), "tags": [],
                      "limits": {"max-connections": 2}}],
           "policies": [{"vhost": "/", "name": uid("pol"), "pattern": "^x$", "definition": {"max-length": 1},
                         "apply-to": "queues", "priority": 0}]}
    assert api(default_srv, "POST", "/api/definitions", doc) == 204
    line = wait_until(lambda: [ln for ln in default_srv.lines if "imported definitions (1 users, 1 policies)" in ln],
                      10, "the audit line")
    assert "sansmq.audit: audit: user 'guest' from 127.0.0.1 imported" in line[0]
    assert api_get(default_srv, f"/api/user-limits/{user}") == [{"user": user, "value": {"max-connections": 2}}]
    assert api(default_srv, "DELETE", f"/api/users/{user}") == 204


def test_the_definitions_file_imported_at_start_is_audited(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "defs.json"
    path.write_text(json.dumps({"vhosts": [{"name": "from-file", "limits": [["max-queues", 3]]}],
                                "parameters": [{"vhost": "from-file", "component": "vhost-limits", "name": "limits",
                                                "value": {"max-queues": 3}}]}))
    srv = serve(kind, BASE_CONFIG, tmp_path, "127.0.0.1", "--definitions", str(path))
    try:
        line = wait_until(lambda: [ln for ln in srv.lines if "sansmq.audit:" in ln], 10, "the audit line")
        assert f"audit: the operator imported definitions (1 vhosts, 1 parameters) from the file {path} at start" in line[0]
        assert api_get(srv, "/api/vhost-limits") == [{"vhost": "from-file", "value": {"max-queues": 3}}]
    finally:
        assert srv.terminate() == 0
