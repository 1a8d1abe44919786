"""Bad input over raw sockets: an ERROR frame, then a close of that connection only.

Each case runs while a well-behaved producer/consumer pair keeps working on the same server;
every message of theirs must arrive, in order.
"""

from __future__ import annotations

import itertools
import os

import pytest
from e2ekit import RawStomp, close_quietly, connect, frame

pytestmark = pytest.mark.timeout(60)

LIMITS = """
[limits]
max_frame_size = 65536
max_body_size = 32768
max_header_count = 32
max_header_line = 1024
heartbeat = [0, 0]
"""

_seq = itertools.count()


@pytest.fixture(scope="module")
def server_config() -> str:
    return LIMITS


def _send(dest: str = "/queue/bad-sink", **headers: str) -> dict[str, str]:
    return {"destination": dest, **headers}


#: name -> (connect first?, bytes to send)
CASES: dict[str, tuple[bool, bytes]] = {
    "garbage-before-connect": (False, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\n\n\x00"),
    "http-request": (False, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    "garbage-after-connect": (True, b"\xff\xfe\xfd\x00\x01garbage\n\n\x00"),
    "unknown-command": (True, frame("FROBNICATE", {"destination": "/queue/x"})),
    "oversized-body": (True, frame("SEND", _send(**{"content-length": "40000"}), b"a" * 40000)),
    "oversized-frame-no-length": (True, frame("SEND", _send()).rstrip(b"\x00") + b"a" * 100_000),
    "too-many-headers": (True, frame("SEND", _send(**{f"h{i}": "v" for i in range(64)}))),
    "header-line-too-long": (True, frame("SEND", _send(big="x" * 4000))),
    "missing-destination": (True, frame("SEND", {"receipt": "r1"}, b"body")),
    "subscribe-without-id": (True, frame("SUBSCRIBE", {"destination": "/queue/x"})),
    "ack-without-id": (True, frame("ACK", {})),
    "bad-escape": (True, b"SEND\ndestination:/queue/bad-sink\nk:v\\q\n\nbody\x00"),
    "bad-content-length": (True, frame("SEND", _send(**{"content-length": "zz"}), b"x")),
    "content-length-lies": (True, frame("SEND", _send(**{"content-length": "2"}), b"abcdef")),
    "no-connect-first": (False, frame("SEND", _send(), b"x")),
}


@pytest.fixture
def bystanders(server):
    """A consumer and a producer that must not notice anything."""
    q = f"bystander-{os.getpid()}-{next(_seq)}"
    consumer, cc = connect(server.addr, "1.2")
    producer, pc = connect(server.addr, "1.1")
    consumer.subscribe(f"/queue/{q}", id="s", headers={"receipt": "sub"})
    cc.wait_receipt("sub")
    yield q, consumer, cc, producer, pc
    close_quietly(consumer)
    close_quietly(producer)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gets_error_and_close(server, bystanders, case: str) -> None:
    q, consumer, cc, producer, pc = bystanders
    for i in range(5):
        producer.send(f"/queue/{q}", f"before-{i}")
    needs_connect, payload = CASES[case]
    raw = RawStomp(server.addr, timeout=5)
    if needs_connect:
        raw.connect("1.2")
    try:
        raw.send(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before reading all of an oversized frame
    command, headers, body = raw.read_frame()
    assert command == "ERROR", (command, headers, body)
    assert headers.get("message"), headers
    raw.read_until_closed()  # then the server closes (a socket timeout would fail the test)
    raw.close()
    for i in range(5):
        producer.send(f"/queue/{q}", f"after-{i}", headers={"receipt": "done"} if i == 4 else {})
    pc.wait_receipt("done")
    bodies = [f.body for f in cc.wait_messages(10)]
    assert bodies == [f"before-{i}" for i in range(5)] + [f"after-{i}" for i in range(5)]
    assert consumer.is_connected() and producer.is_connected()
    assert not cc.errors and not pc.errors


def test_many_bad_clients_at_once(server, bystanders) -> None:
    q, consumer, cc, producer, pc = bystanders
    raws = []
    for i, (needs_connect, payload) in enumerate(list(CASES.values()) * 3):
        raw = RawStomp(server.addr, timeout=5)
        if needs_connect:
            raw.connect("1.2")
        raws.append((raw, payload))
        producer.send(f"/queue/{q}", f"m{i}")
    for raw, payload in raws:
        try:
            raw.send(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
    for raw, _ in raws:
        assert raw.read_frame()[0] == "ERROR"
        raw.read_until_closed()
        raw.close()
    producer.send(f"/queue/{q}", "last", headers={"receipt": "last"})
    pc.wait_receipt("last")
    n = len(raws)
    assert [f.body for f in cc.wait_messages(n + 1)] == [f"m{i}" for i in range(n)] + ["last"]
