"""A STOMP 1.2 client on a plain blocking socket, using only stompproto: send, receipt, subscribe, ack, heart-beats.

    python docs/examples/stomp_blocking.py [--host 127.0.0.1] [--port 61613] [--idle 30]
"""

from __future__ import annotations

import argparse
import math
import socket
import time

from stompproto import (
    CLIENT,
    NEED_DATA,
    Ack,
    Connect,
    Connected,
    Connection,
    ConnectionClosed,
    Disconnect,
    Error,
    Frame,
    Heartbeat,
    HeartbeatDue,
    Message,
    PeerTimedOut,
    Receipt,
    Send,
    Subscribe,
)


class StompClient:
    """One connection: the codec decides what the bytes mean, this class only moves them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.conn = Connection(CLIENT)
        self.clock = time.monotonic
        self.heartbeats_sent = 0

    def send(self, frame: Frame | Heartbeat) -> None:
        self.sock.sendall(self.conn.send(frame, now=self.clock()))  # `now` moves our heart-beat deadline

    def next_frame(self, until: float = math.inf) -> Frame | None:
        """The next frame from the broker, or None at ``until`` (time.monotonic). Heart-beats are sent and
        checked here, on the codec's timer, for as long as we wait."""
        while True:
            event = self.conn.next_event()
            if event is NEED_DATA:
                timer, now = self.conn.get_timer(), self.clock()
                timer = math.inf if timer is None else timer
                if timer <= now:
                    self.conn.handle_timer(now)  # queues HeartbeatDue and/or PeerTimedOut
                    continue
                if until <= now:
                    return None
                wake = min(timer, until)
                self.sock.settimeout(None if wake == math.inf else wake - now)
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    continue  # a deadline passed: handled at the top of the loop
                self.conn.receive_data(data, now=self.clock())  # b"" (EOF) becomes ConnectionClosed
            elif isinstance(event, HeartbeatDue):
                self.send(Heartbeat())
                self.heartbeats_sent += 1
            elif isinstance(event, PeerTimedOut | ConnectionClosed):
                raise ConnectionError(f"connection lost: {type(event).__name__}")
            elif isinstance(event, Error):
                raise ConnectionError(f"broker error: {event.headers.get('message')}")
            elif isinstance(event, Frame):
                return event  # (the broker's Heartbeat events need nothing: receive_data noted them)


def main(host: str, port: int, queue: str, count: int, heartbeat_ms: int, idle: float) -> None:
    client = StompClient(socket.create_connection((host, port)))
    client.send(Connect({"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest",
                         "heart-beat": f"{heartbeat_ms},{heartbeat_ms}"}))
    connected = client.next_frame()
    assert isinstance(connected, Connected)
    print(f"connected: STOMP {client.conn.version}, heart-beats {client.conn.heartbeat} ms")

    for i in range(count):  # the receipt of the last SEND covers all of them: frames are handled in order
        headers = {"destination": f"/queue/{queue}", "persistent": "true"}
        client.send(Send(headers | ({"receipt": "sent"} if i == count - 1 else {}), f"message {i}".encode()))
    assert isinstance(client.next_frame(), Receipt)
    print(f"sent {count} messages")

    client.send(Subscribe({"id": "0", "destination": f"/queue/{queue}", "ack": "client-individual"}))
    for _ in range(count):
        message = client.next_frame()
        assert isinstance(message, Message)
        print(f"received {message.body.decode()!r}")
        client.send(Ack({"id": message.headers["ack"]}))

    before = client.heartbeats_sent  # wait for a message that does not come: heart-beats keep us connected
    assert client.next_frame(until=client.clock() + idle) is None
    print(f"idle {idle:g} s: {client.heartbeats_sent - before} heart-beats sent")

    client.send(Disconnect({"receipt": "bye"}))
    assert isinstance(client.next_frame(), Receipt)  # everything we sent was processed
    client.sock.close()
    print("disconnected")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=61613)
    parser.add_argument("--queue", default="docs-stomp-blocking")
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to wait idle at the end")
    args = parser.parse_args()
    main(args.host, args.port, args.queue, args.count, args.heartbeat_ms, args.idle)
