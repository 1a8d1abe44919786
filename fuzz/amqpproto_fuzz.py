"""atheris harness for amqpproto.

Invariants checked by ``check(data)``:
  * only RemoteProtocolError escapes next_event (and never with 541 INTERNAL_ERROR, which
    marks a bug of ours caught defensively);
  * feeding the same bytes whole, byte by byte and in data-derived chunks gives the same
    events and the same final error code.

The first input byte picks the role (bit 0: 1 = server reading a client's stream, 0 = client
reading a server's stream, after sending its own header) and the chunk pattern; the rest is the
stream. Seeds: ``python fuzz/amqpproto_fuzz.py --make-corpus fuzz/corpus/amqpproto``.
Smoke run: ``python fuzz/amqpproto_fuzz.py -runs=20000 fuzz/corpus/amqpproto``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("amqpproto") is None:  # a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

FUZZING = __name__ == "__main__" and "--make-corpus" not in sys.argv
if FUZZING:
    import atheris

    with atheris.instrument_imports(include=["amqpproto"]):
        import amqpproto as a
        from amqpproto import spec
else:
    import amqpproto as a
    from amqpproto import spec

MAX_EVENTS = 10000


def _run(server: bool, stream: bytes, chunks: list[int]) -> list[str]:
    conn = a.Connection(a.SERVER if server else a.CLIENT, frame_max=65536,
                        max_body_size=1 << 20)
    if not server:
        conn.send(a.ProtocolHeader())
    out: list[str] = []
    i = 0

    def drain() -> bool:
        while len(out) < MAX_EVENTS:
            try:
                ev = conn.next_event()
            except a.RemoteProtocolError as e:
                if e.reply_code == spec.INTERNAL_ERROR:
                    raise AssertionError(f"internal error escaped as 541: {e}") from e
                out.append(f"error {e.reply_code} {type(e.hint).__name__}")
                return False
            if ev is a.NEED_DATA:
                return True
            out.append(repr(ev))
            if isinstance(ev, a.ConnectionClosed):
                return False
            _answer(conn, ev)
        return False

    for n in chunks:
        if i >= len(stream):
            break
        conn.receive_data(stream[i:i + n])
        i += n
        if not drain():
            return out
    if i < len(stream):
        conn.receive_data(stream[i:])
        if not drain():
            return out
    conn.receive_data(b"")
    drain()
    return out


_SERVER_REPLIES = {a.ProtocolHeader: [a.ConnectionStart(mechanisms=b"PLAIN")],
                   a.ConnectionStartOk: [a.ConnectionTune(2047, 4096, 0)],
                   a.ConnectionOpen: [a.ConnectionOpenOk()]}
_CLIENT_REPLIES = {a.ConnectionStart: [a.ConnectionStartOk(response=b"\0guest\0guest")],
                   a.ConnectionTune: [a.ConnectionTuneOk(2047, 4096, 0), a.ConnectionOpen()],
                   a.ConnectionOpenOk: [a.ChannelOpen(channel=1)]}


def _answer(conn: a.Connection, ev: object) -> None:
    """Play the other side just enough for the state machines to move on."""
    table = _SERVER_REPLIES if conn.our_role is a.SERVER else _CLIENT_REPLIES
    replies = list(table.get(type(ev), ()))
    if type(ev) is a.ChannelOpen:
        replies = [a.ChannelOpenOk(channel=ev.channel)]
    elif type(ev) is a.ChannelClose:
        replies = [a.ChannelCloseOk(channel=ev.channel)]
    elif type(ev) is a.ConnectionClose:
        replies = [a.ConnectionCloseOk()]
    for reply in replies:
        try:
            conn.send(reply)
        except a.LocalProtocolError:
            pass  # the stream is arbitrary; only the parse side is under test


def check(data: bytes) -> None:
    if not data:
        return
    server = bool(data[0] & 1)
    stream = data[1:]
    whole = _run(server, stream, [len(stream) or 1])
    step = (data[0] >> 1) % 13 + 2
    chunks = [(b % step) + 1 for b in stream] or [1]
    chunked = _run(server, stream, chunks)
    assert whole == chunked, (whole, chunked)
    if len(stream) <= 1024:  # byte by byte is slow; bounded to keep exec/s useful
        assert whole == _run(server, stream, [1] * len(stream))


def seeds() -> dict[str, bytes]:
    """Valid sessions from both sides plus a few malformed ones."""
    c, s = a.Connection(a.CLIENT, frame_max=4096), a.Connection(a.SERVER, frame_max=4096)
    to_server, to_client = [c.send(a.ProtocolHeader())], []
    s.receive_data(to_server[0])
    s.next_event()
    script = [
        (s, a.ConnectionStart(server_properties={"product": "x", "caps": {"a": True}},
                              mechanisms=b"PLAIN AMQPLAIN")),
        (c, a.ConnectionStartOk(client_properties={"n": 1, "f": 1.5, "l": [None, "s"]},
                                response=a.plain_response("guest", "guest"))),
        (s, a.ConnectionTune(2047, 4096, 0)), (c, a.ConnectionTuneOk(2047, 4096, 0)),
        (c, a.ConnectionOpen()), (s, a.ConnectionOpenOk()),
        (c, a.ChannelOpen(channel=1)), (s, a.ChannelOpenOk(channel=1)),
        (c, a.QueueDeclare(queue="q", arguments={"x-max-length": 10}, channel=1)),
        (s, a.QueueDeclareOk("q", 0, 0, channel=1)),
        (c, a.BasicPublish(routing_key="q", body=b"hello" * 1800, channel=1,
                           properties=a.BasicProperties(content_type="t", headers={"k": b"v"},
                                                        timestamp=1700000000))),
        (c, a.BasicConsume(queue="q", channel=1)), (s, a.BasicConsumeOk("ctag", channel=1)),
        (s, a.BasicDeliver("ctag", 1, False, "", "q", a.BasicProperties(priority=1), b"m",
                           channel=1)),
        (c, a.BasicAck(1, channel=1)), (c, a.Heartbeat()), (s, a.Heartbeat()),
        (c, a.ChannelClose(200, "", channel=1)), (s, a.ChannelCloseOk(channel=1)),
        (c, a.ConnectionClose(200, "bye")), (s, a.ConnectionCloseOk()),
    ]
    for conn, ev in script:
        wire = conn.send(ev)
        (to_server if conn is c else to_client).append(wire)
        other = s if conn is c else c
        other.receive_data(wire)
        while other.next_event() is not a.NEED_DATA:
            pass
    srv, cli = b"".join(to_server), b"".join(to_client)
    return {
        "client-session": b"\x01" + srv,
        "server-session": b"\x00" + cli,
        "client-session-chunky": b"\x0b" + srv,
        "bad-header": b"\x01AMQP\x01\x01\x00\x09",
        "bad-frame-end": b"\x01" + srv[:8] + srv[8:60],
        "oversized-frame": b"\x01" + srv[:8] + b"\x01\x00\x00\xff\xff\xff\xff",
        "server-refuses-version": b"\x00AMQP\x00\x00\x09\x02",
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--make-corpus":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for name, data in seeds().items():
            (out / name).write_bytes(data)
        return
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
