"""Helpers of the client tests: real `python -m servers serve` brokers on fixed ports (so they can be killed
and started again in place), and one runner for both async front ends (the asyncio and trio APIs are
the same, so one scenario runs on both). Named apart from conftest: tests/e2e has a conftest too."""

from __future__ import annotations

import asyncio
import importlib
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2ekit import ServerProcess  # noqa: E402  (the e2e suite's server launcher)

from servers.management import OPS_EPHEMERAL  # noqa: E402

#: the broker grants heart-beats down to 100 ms, so STOMP tests can use 0.3 s (AMQP's unit is 1 s)
CONFIG = "[limits]\nheartbeat = [100, 100]\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """A broker on fixed ports and a data directory, so it can be killed and started again in place."""

    def __init__(self, data: Path, config: Path, kind: str = "threads") -> None:
        self.data, self.config, self.kind = data, config, kind
        self.ports = {"stomp": free_port(), "amqp": free_port()}
        self.proc: ServerProcess | None = None

    def start(self) -> Broker:
        cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", self.kind,
               "--stomp", f"127.0.0.1:{self.ports['stomp']}", "--amqp", f"127.0.0.1:{self.ports['amqp']}",
               "--ws", "127.0.0.1:0",  # never a default port (15674): other brokers run on this machine
               "--data", str(self.data), "--config", str(self.config)]
        self.proc = ServerProcess(cmd, self.kind)
        self.proc.port("amqp")  # both listeners are up
        return self

    def url(self, protocol: str, query: str = "", vhost: str = "/", creds: str = "guest:guest") -> str:
        return f"{protocol}://{creds}@127.0.0.1:{self.ports[protocol]}/{vhost.lstrip('/')}" + (
            f"?{query}" if query else "")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.proc.poll() is None:
            self.proc.proc.send_signal(signal.SIGCONT)
            assert self.proc.terminate() == 0, self.proc.lines[-20:]


def make_broker(tmp: Path, kind: str = "threads") -> Broker:
    config = tmp / "sansmq.toml"
    config.write_text(CONFIG)
    (tmp / "data").mkdir()
    return Broker(tmp / "data", config, kind)


def name(prefix: str = "q") -> str:
    return f"client-{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Io:
    """One async front end: its module (``connect``) and its sleep."""

    kind: str
    client: Any
    sleep: Callable[[float], Awaitable[None]]


ASYNC = ["asyncio", "trio"]


def run_async(kind: str, scenario: Callable[..., Awaitable[Any]], *args: Any, timeout: float = 60) -> Any:
    io = Io(kind, importlib.import_module(f"sansmq_client.{kind}"), asyncio.sleep if kind == "asyncio" else trio.sleep)
    if kind == "asyncio":
        return asyncio.run(asyncio.wait_for(scenario(io, *args), timeout))

    async def bounded() -> Any:
        with trio.fail_after(timeout):
            return await scenario(io, *args)
    return trio.run(bounded)


async def until(io: Io, predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` on the front end's own sleep (the I/O task keeps running meanwhile)."""
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await io.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
