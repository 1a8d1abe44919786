"""The "write your own client" examples of the docs (docs/examples/*.py) run as written against a real
`sansmq serve` on free ports, and say what the guide says they say.

Each example waits idle at the end for longer than the broker's heart-beat timeout allows a silent
client: its last request (DISCONNECT's receipt, connection.close-ok) only succeeds if the example
kept the connection alive with heart-beats on the codec's timer.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2ekit import ServerProcess, start_server  # noqa: E402  (the e2e suite's server launcher)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
COUNT = 3
# The broker grants heart-beats down to 100 ms; the examples ask for 300 ms (STOMP) and 1 s (AMQP).
CONFIG = "[limits]\nheartbeat = [100, 100]\n"
ARGS = {
    "stomp": ["--heartbeat-ms", "300", "--idle", "1.2"],
    "amqp": ["--heartbeat", "1", "--idle", "2.5"],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(CONFIG)
    srv = start_server("threads", path)
    try:
        yield srv
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def run_example(name: str, port: int) -> list[str]:
    protocol = name.split("_")[0]
    cmd = [sys.executable, str(EXAMPLES / f"{name}.py"), "--host", "127.0.0.1", "--port", str(port),
           "--queue", f"docs-{name}-{uuid.uuid4().hex[:8]}", "--count", str(COUNT), *ARGS[protocol]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


# What each protocol's examples print around the received messages, and the fewest heart-beats their
# idle wait needs (STOMP: 1.2 s at 300 ms; AMQP: the broker drops a client silent for two 1 s periods).
EXPECTED = {
    "stomp": (["connected: STOMP 1.2, heart-beats (300, 300) ms", f"sent {COUNT} messages"],
              r"idle 1.2 s: (\d+) heart-beats sent", 2, ["disconnected"]),
    "amqp": (["connected: AMQP 0-9-1, heart-beat 1 s", f"published {COUNT} messages, all confirmed"],
             r"idle 2.5 s: (\d+) heart-beats sent", 1, ["closed"]),
}


@pytest.mark.parametrize("io", ["asyncio", "trio", "blocking"])
@pytest.mark.parametrize("protocol", list(EXPECTED))
def test_example(server: ServerProcess, protocol: str, io: str) -> None:
    head, idle_line, least_heartbeats, tail = EXPECTED[protocol]
    lines = run_example(f"{protocol}_{io}", server.port(protocol))
    assert lines[:2] == head
    assert lines[2:2 + COUNT] == [f"received 'message {i}'" for i in range(COUNT)]
    idle = re.fullmatch(idle_line, lines[2 + COUNT])
    assert idle and int(idle.group(1)) >= least_heartbeats, lines
    assert lines[3 + COUNT:] == tail


def test_every_example_is_tested() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(
        f"{protocol}_{io}" for protocol in ARGS for io in ("asyncio", "trio", "blocking"))
