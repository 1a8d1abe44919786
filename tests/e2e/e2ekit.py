"""End-to-end helpers: a real `sansmq serve` subprocess per (module, server kind), real clients.

The server runs as ``python -m servers serve --stomp 127.0.0.1:0`` so that it has its own GIL (a
second core); the bound port is read from its log line.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from stomp.listener import ConnectionListener
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

import amqpproto as A
from amqpproto import spec
from servers import Running, running
from servers.management import OPS_EPHEMERAL, OpsListeners

#: the listener line of the text log format (timestamp and level first, then the component)
LISTEN_RE = re.compile(r"(?:\S+ +\S+ +)?sansmq: (\w+) listening on \[?([^\s\]]+)\]?:(\d+) \((\w+) server\)")

#: a config for most modules: quick heart-beats, default size limits
BASE_CONFIG = """
[limits]
heartbeat = [250, 500]
"""


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``pred`` until truthy (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class ServerProcess:
    """A broker subprocess; ``cmd`` must end up printing the listener log line on stderr."""

    def __init__(self, cmd: list[str], kind: str, **popen: Any) -> None:
        """``popen``: more subprocess.Popen arguments (e.g. a preexec_fn setting limits)."""
        self.kind = kind
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, **popen
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            match = wait_until(self._listening, 20, f"the {kind} server's listening line")
        except BaseException:
            self.proc.kill()  # never leave a stray server behind a failed start
            self.proc.wait()
            raise
        assert match.group(1) == "stomp" and match.group(4) == kind
        self.addr = (match.group(2), int(match.group(3)))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def _listening(self) -> re.Match[str] | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited early: {self.lines}")
        for line in list(self.lines):
            if m := LISTEN_RE.fullmatch(as_text_line(line)):
                return m
        return None

    def port(self, protocol: str) -> int:
        """The port ``protocol``'s listener bound (from its log line, text or JSON; the lines of
        the other listeners may follow the first one a little later)."""

        def find() -> int | None:
            return next((int(m.group(3)) for line in list(self.lines)
                         if (m := LISTEN_RE.fullmatch(as_text_line(line))) and m.group(1) == protocol), None)

        return wait_until(find, 10, f"the {protocol} listening line")

    def terminate(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.kind} server ignored SIGTERM: {self.lines[-20:]}") from None


@contextlib.contextmanager
def ops_server(config: Any = None) -> Iterator[tuple[Running, OpsListeners]]:
    """An in-process threads server (an AMQP listener) with the management and Prometheus listeners,
    all on free ports."""
    with running("threads", [("amqp", "127.0.0.1", 0)], config=config) as r:
        ops = OpsListeners(r.server, ("127.0.0.1", 0), ("127.0.0.1", 0))
        ops.start()
        try:
            yield r, ops
        finally:
            ops.stop()


def as_text_line(line: str) -> str:
    """A ``--log-format json`` listener line rewritten as the text format's, so that one regex
    finds the listeners in both formats; any other line is returned as it is."""
    if line.startswith("{") and '"listener.started"' in line:
        rec = json.loads(line)
        return f"sansmq: {rec['protocol']} listening on {rec['address']} ({rec['server']} server)"
    return line


def fresh_data_dir() -> str:
    """A private data directory per server process: never the shared ./sansmq-data default."""
    path = tempfile.mkdtemp(prefix="sansmq-e2e-")
    atexit.register(shutil.rmtree, path, True)
    return path


def start_server(kind: str, config_path: Path, *extra: str) -> ServerProcess:
    cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", kind, "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0",
           "--amqp", "127.0.0.1:0", "--data", fresh_data_dir()]
    return ServerProcess([*cmd, "--config", str(config_path), *extra], kind)


# -- stomp.py ----------------------------------------------------------------------------------
class Collector(ConnectionListener):
    """Records what a stomp.py connection receives; waits are bounded."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Any] = []
        self.receipts: list[str] = []
        self.receipt_frames: list[Any] = []
        self.errors: list[Any] = []
        self.disconnected = False
        self.heartbeat_timeouts = 0

    def _add(self, where: list[Any], item: Any) -> None:
        with self.cond:
            where.append(item)
            self.cond.notify_all()

    def on_message(self, frame: Any) -> None:
        self._add(self.messages, frame)

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipt_frames.append(frame)
        self._add(self.receipts, frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self._add(self.errors, frame)

    def on_disconnected(self) -> None:
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def on_heartbeat_timeout(self) -> None:
        with self.cond:
            self.heartbeat_timeouts += 1
            self.cond.notify_all()

    def wait(self, pred: Callable[[], Any], timeout: float = 10.0, what: str = "frames") -> None:
        with self.cond:
            if not self.cond.wait_for(pred, timeout):
                raise AssertionError(
                    f"timed out waiting for {what}: {len(self.messages)} messages, "
                    f"receipts {self.receipts}, errors {[e.body for e in self.errors]}"
                )

    def wait_messages(self, n: int, timeout: float = 10.0) -> list[Any]:
        self.wait(lambda: len(self.messages) >= n, timeout, f"{n} messages")
        return self.messages[:n]

    def wait_receipt(self, rid: str, timeout: float = 10.0) -> None:
        self.wait(lambda: rid in self.receipts, timeout, f"receipt {rid}")

    def bodies(self) -> list[str]:
        with self.cond:
            return [m.body for m in self.messages]


CONNECTION_CLASSES = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


def connect(
    addr: tuple[str, int], version: str = "1.2", heartbeats: tuple[int, int] = (0, 0), **kw: Any
) -> tuple[Any, Collector]:
    cls = CONNECTION_CLASSES[version]
    if version != "1.0":
        kw["heartbeats"] = heartbeats
    if version != "1.0":
        kw.setdefault("vhost", "/")  # stomp.py's default host header is the address, no vhost here
    conn = cls([addr], reconnect_attempts_max=1, timeout=5, **kw)
    coll = Collector()
    conn.set_listener("c", coll)
    conn.connect("guest", "guest", wait=True)
    return conn, coll


def ack_args(version: str, frame: Any) -> dict[str, Any]:
    """stomp.py's ack()/nack() arguments for a MESSAGE frame in each protocol version."""
    h = frame.headers
    if version == "1.0":
        return {"id": h["message-id"]}
    if version == "1.1":
        return {"id": h["message-id"], "subscription": h["subscription"]}
    return {"id": h["ack"]}


def close_quietly(conn: Any) -> None:
    try:
        if conn.is_connected():
            conn.disconnect()
    except Exception:  # noqa: BLE001 - teardown of an already broken connection
        pass


# -- raw STOMP over a socket -------------------------------------------------------------------
def frame(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [command, *(f"{k}:{v}" for k, v in (headers or {}).items())]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


class RawStomp:
    """A bare socket speaking STOMP by hand, for what a polite client library cannot do."""

    def __init__(self, addr: tuple[str, int], timeout: float = 10.0, rcvbuf: int = 0) -> None:
        self.sock = socket.socket()
        if rcvbuf:  # before connect(), so the TCP window is negotiated small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(addr)
        self.buf = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send(frame(command, headers, body))

    def connect(self, version: str = "1.2", heartbeat: str = "0,0") -> dict[str, str]:
        self.send_frame(
            "CONNECT",
            {"accept-version": version, "host": "/", "login": "guest", "passcode": "guest",
             "heart-beat": heartbeat},
        )
        command, headers, _ = self.read_frame()
        assert command == "CONNECTED", (command, headers)
        return headers

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError(bytes(self.buf[:200]))
        self.buf += chunk

    def read_frame(self) -> tuple[str, dict[str, str], bytes]:
        """The next frame (heart-beat EOLs skipped); EOFError if the server closed first."""
        while True:
            while self.buf[:1] in (b"\n", b"\r"):
                del self.buf[:1]
            end = self.buf.find(b"\n\n")
            if end >= 0:
                break
            self._fill()
        head = self.buf[:end].decode().replace("\r", "").split("\n")
        headers: dict[str, str] = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers.setdefault(k, v)
        start = end + 2
        if "content-length" in headers:
            stop = start + int(headers["content-length"])
            while len(self.buf) < stop + 1:
                self._fill()
        else:
            while (stop := self.buf.find(b"\x00", start)) < 0:
                self._fill()
        body = bytes(self.buf[start:stop])
        del self.buf[: stop + 1]
        return head[0], headers, body

    def read_until_closed(self) -> bytes:
        """Everything the server sends until it closes (socket timeout = failure)."""
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            self.buf += chunk
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def close(self) -> None:
        self.sock.close()


_uid_seq = itertools.count()


@contextlib.contextmanager
def pika_open(params: Any) -> Iterator[Any]:
    """A pika BlockingConnection closed on exit if the broker has not closed it."""
    import pika

    c = pika.BlockingConnection(params)
    try:
        yield c
    finally:
        if c.is_open:
            c.close()


def uid(prefix: str) -> str:
    """A queue/destination name no other test (or test process) uses."""
    return f"{prefix}-{os.getpid()}-{next(_uid_seq)}"


# -- STOMP over the `websockets` client ----------------------------------------------------------
class WsStomp:
    """A STOMP client over a `websockets` connection, parsing frames itself (across messages)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.buf = b""

    def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"", binary: bool = False) -> None:
        data = frame(command, headers, body)
        self.ws.send(data if binary else data.decode())

    def read_frame(self) -> tuple[str, dict[str, str], bytes]:
        while True:
            self.buf = self.buf.lstrip(b"\r\n")  # heart-beats
            head_end = self.buf.find(b"\n\n")
            if head_end >= 0:
                lines = self.buf[:head_end].decode().split("\n")
                headers = dict(line.split(":", 1) for line in lines[1:])
                start = head_end + 2
                if "content-length" in headers:
                    end = start + int(headers["content-length"])
                    ok = len(self.buf) > end
                else:
                    end = self.buf.find(b"\x00", start)
                    ok = end >= 0
                if ok:
                    body = self.buf[start:end]
                    self.buf = self.buf[end + 1:]
                    return lines[0], headers, body
            msg = self.ws.recv(timeout=10.0)
            self.buf += msg.encode() if isinstance(msg, str) else msg

    def expect(self, command: str) -> tuple[dict[str, str], bytes]:
        got, headers, body = self.read_frame()
        assert got == command, (got, headers, body)
        return headers, body

    def connect(self) -> dict[str, str]:
        self.send("CONNECT", {"accept-version": "1.2", "host": "/", "heart-beat": "0,0", "login": "guest",
                              "passcode": "guest"})
        return self.expect("CONNECTED")[0]

    def receipt(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        rid = uid("r")
        self.send(command, {**headers, "receipt": rid}, body)
        h, _ = self.expect("RECEIPT")
        assert h["receipt-id"] == rid


# -- AMQP over the `websockets` client ----------------------------------------------------------
class WsAmqp:
    """An AMQP client: amqpproto (client role) framed by a `websockets` connection."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.conn = A.Connection(A.CLIENT)

    def send(self, event: Any) -> None:
        self.ws.send(self.conn.send(event, time.time()))

    def send_bytes(self, data: bytes) -> None:
        self.ws.send(data)

    def encode(self, event: Any) -> bytes:
        return self.conn.send(event, time.time())

    def next(self) -> Any:
        while True:
            ev = self.conn.next_event()
            if ev is not A.NEED_DATA:
                return ev
            data = self.ws.recv(timeout=10.0)
            assert isinstance(data, bytes), f"AMQP arrived in a text message: {data!r}"
            self.conn.receive_data(data, time.time())

    def expect(self, cls: type) -> Any:
        ev = self.next()
        assert isinstance(ev, cls), ev
        return ev

    def open(self, user: str = "guest", password: str = "guest", vhost: str = "/") -> None:
        self.send(A.ProtocolHeader())
        self.expect(spec.ConnectionStart)
        self.send(spec.ConnectionStartOk({"product": "e2e-ws"}, "PLAIN", A.plain_response(user, password),
                                         "en_US"))
        tune = self.expect(spec.ConnectionTune)
        self.send(self.conn.tune_ok(tune))
        self.send(spec.ConnectionOpen(vhost))
        self.expect(spec.ConnectionOpenOk)
        self.send(spec.ChannelOpen(channel=1))
        self.expect(spec.ChannelOpenOk)

    def close(self) -> None:
        self.send(spec.ConnectionClose(200, "bye", 0, 0))
        self.expect(spec.ConnectionCloseOk)
        with pytest.raises(ConnectionClosed) as info:  # the server ends the WebSocket with a Close 1000
            self.ws.recv(timeout=10.0)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1000


@contextlib.contextmanager
def celery_worker(app: str, cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker process (solo pool, no gossip, mingle or heartbeat) for the app module ``app``
    in ``cwd``; stopped on exit, where it must have exited cleanly."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", app, "worker", "--pool=solo", "-l", "warning",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield worker
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err.decode(errors="replace")[-2000:]
