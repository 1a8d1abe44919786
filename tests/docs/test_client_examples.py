"""The client guide's examples (docs/examples/client/*.py) run as written against a real `sansmq serve`:
the trio AMQP publisher fills a queue that the asyncio STOMP consumer then empties (the same queue seen
through both protocols), and the sync worker publishes from threads to its own callback."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2ekit import BASE_CONFIG, ServerProcess, start_server  # noqa: E402  (the e2e suite's server launcher)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "client"
COUNT = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(BASE_CONFIG)
    srv = start_server("asyncio", path)
    try:
        yield srv
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def run(example: str, url: str, queue: str) -> list[str]:
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{example}.py"), "--url", url, "--queue", queue,
                           "--count", str(COUNT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_trio_amqp_publisher_then_asyncio_stomp_consumer(server: ServerProcess) -> None:
    queue = f"guide-{uuid.uuid4().hex[:8]}"
    published = run("amqp_publisher_trio", f"amqp://guest:guest@127.0.0.1:{server.port('amqp')}/", queue)
    assert published == [f"published {COUNT} messages, all confirmed"]
    consumed = run("stomp_consumer_asyncio", f"stomp://guest:guest@127.0.0.1:{server.port('stomp')}/", queue)
    assert consumed == ["connected", *(f"received 'message {i}'" for i in range(COUNT)), "closed"]


def test_sync_worker(server: ServerProcess) -> None:
    lines = run("sync_worker", f"amqp://guest:guest@127.0.0.1:{server.port('amqp')}/", f"jobs-{uuid.uuid4().hex[:8]}")
    assert lines == [f"handled {[f'job {i}' for i in range(COUNT)]}"]


def test_bulk_stream(server: ServerProcess) -> None:
    lines = run("bulk_stream", f"amqp://guest:guest@127.0.0.1:{server.port('amqp')}/", f"events-{uuid.uuid4().hex[:8]}")
    assert lines == [f"offset {i}: row {i}" for i in range(COUNT)]


def test_every_client_example_is_tested() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == ["amqp_publisher_trio", "bulk_stream",
                                                             "stomp_consumer_asyncio", "sync_worker"]
