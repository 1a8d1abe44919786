"""amqpproto vs pamqp, side by side in one run.

unmarshal: Deliver + content header + body frames (bytes -> one message), through a client-role
Connection (so state checks and content assembly are included) vs pamqp.frame.unmarshal x3.
marshal: Publish + header + body (one message -> bytes) via Connection.send vs pamqp.frame.marshal
x3. Bodies of 100 B and 1 KB. Prints ops/s and the ratio (amqpproto / pamqp).

    .venv/bin/python benchmarks/bench_amqpproto.py [--seconds 0.3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from pamqp import body as p_body
from pamqp import commands as p_cmd
from pamqp import frame as p_frame
from pamqp import header as p_header

import amqpproto as a

PROPS = dict(content_type="application/json", delivery_mode=2, message_id="m-1",
             headers={"x-trace": "abc", "n": 7})


def open_client() -> a.Connection:
    """A client-role Connection driven through the handshake with channel 1 open."""
    return open_pair()[0]


def open_pair() -> tuple[a.Connection, a.Connection]:
    """A client-role and a server-role Connection, handshaken in memory, with channel 1 open."""
    c = a.Connection(a.CLIENT)
    s = a.Connection(a.SERVER)
    for src, dst, ev in [
        (c, s, a.ProtocolHeader()),
        (s, c, a.ConnectionStart(mechanisms=b"PLAIN", locales=b"en_US")),
        (c, s, a.ConnectionStartOk(response=a.plain_response("guest", "guest"))),
        (s, c, a.ConnectionTune(2047, 131072, 0)),
        (c, s, a.ConnectionTuneOk(2047, 131072, 0)),
        (c, s, a.ConnectionOpen()),
        (s, c, a.ConnectionOpenOk()),
        (c, s, a.ChannelOpen(channel=1)),
        (s, c, a.ChannelOpenOk(channel=1)),
    ]:
        dst.receive_data(src.send(ev))
        assert dst.next_event() is not a.NEED_DATA
    return c, s


def rate(fn, seconds: float) -> float:
    n, batch = 0, 200
    t0 = time.perf_counter()
    while True:
        for _ in range(batch):
            fn()
        n += batch
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n / dt


def deliver_bytes(body: bytes) -> bytes:
    props = p_cmd.Basic.Properties(**PROPS)
    return b"".join([
        p_frame.marshal(p_cmd.Basic.Deliver("ctag", 42, False, "amq.direct", "rk"), 1),
        p_frame.marshal(p_header.ContentHeader(0, len(body), props), 1),
        p_frame.marshal(p_body.ContentBody(body), 1),
    ])


def body_of(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + b"x" * (size % 256)


def amqpproto_cases(size: int) -> list[tuple[str, Callable[[], None]]]:
    """amqpproto's side of each case, one message per call (bench_compiled.py times these too)."""
    body = body_of(size)
    wire = deliver_bytes(body)
    client = open_client()

    def ours_unmarshal() -> None:
        client.receive_data(wire)
        client.next_event()

    pub_client = open_client()
    props = a.BasicProperties(**PROPS)

    def ours_marshal() -> None:
        pub_client.send(a.BasicPublish(exchange="amq.direct", routing_key="rk",
                                       properties=props, body=body, channel=1))

    # sanity: the message comes out as pamqp wrote it
    client.receive_data(wire)
    ev = client.next_event()
    assert ev.body == body and ev.properties.message_id == "m-1", ev
    return [(f"unmarshal deliver+hdr+body {size}B", ours_unmarshal),
            (f"marshal publish+hdr+body {size}B", ours_marshal)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{'case':32} {'amqpproto ops/s':>16} {'pamqp ops/s':>14} {'ratio':>7}")
    for size in (100, 1024):
        body = body_of(size)
        wire = deliver_bytes(body)

        def pamqp_unmarshal() -> None:
            data = wire
            n, ch, m = p_frame.unmarshal(data)
            data = data[n:]
            n, ch, h = p_frame.unmarshal(data)
            data = data[n:]
            n, ch, b = p_frame.unmarshal(data)

        p_props = p_cmd.Basic.Properties(**PROPS)

        def pamqp_marshal() -> None:
            b"".join([
                p_frame.marshal(p_cmd.Basic.Publish(exchange="amq.direct", routing_key="rk"), 1),
                p_frame.marshal(p_header.ContentHeader(0, len(body), p_props), 1),
                p_frame.marshal(p_body.ContentBody(body), 1),
            ])

        for (name, ours), theirs in zip(amqpproto_cases(size), (pamqp_unmarshal, pamqp_marshal), strict=True):
            r_ours = r_theirs = 0.0
            for _ in range(args.rounds):  # alternate and keep the best: the machine is shared
                r_ours = max(r_ours, rate(ours, args.seconds))
                r_theirs = max(r_theirs, rate(theirs, args.seconds))
            print(f"{name:32} {r_ours:16,.0f} {r_theirs:14,.0f} {r_ours / r_theirs:6.2f}x")


if __name__ == "__main__":
    main()
