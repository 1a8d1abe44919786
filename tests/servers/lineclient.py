"""Blocking test clients with bounded waits."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


class LineClient:
    """A blocking socket with bounded waits."""

    def __init__(self, addr: tuple[str, int], timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.buf = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def readline(self) -> bytes:
        while (i := self.buf.find(b"\n")) < 0:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError(bytes(self.buf))
            self.buf += chunk
        line = bytes(self.buf[:i])
        del self.buf[: i + 1]
        return line

    def ask(self, line: bytes) -> bytes:
        self.send(line + b"\n")
        return self.readline()

    def read_eof(self) -> bytes:
        """Everything until the server closes (raises socket.timeout if it does not)."""
        while chunk := self.sock.recv(1 << 20):
            self.buf += chunk
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def close(self) -> None:
        self.sock.close()


def wait_for(pred: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
