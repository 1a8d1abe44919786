"""The driver is SIGKILLed between the sink's publish and Spark's commit; the restarted query replays
that micro-batch, and the broker's producer deduplication keeps the output exactly-once (sansmq).
RabbitMQ (SANSMQ_RABBITMQ) has no deduplication: there the replayed batch is in the output twice,
which is the at-least-once the README promises for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from driver_job import copy_query
from e2ekit import wait_until
from pipelinekit import Broker

JOB = Path(__file__).with_name("driver_job.py")
ROWS = 3000  # three micro-batches of 1000


def _driver(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, str(JOB), *args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)  # its own group: the JVM dies with it


def test_sigkill_between_publish_and_commit_then_restart_is_exactly_once(spark, broker: Broker, tmp_path: Path) -> None:
    src, dst = broker.stream("pipe-crash-src"), broker.stream("pipe-crash-dst")
    broker.publish(src, [f"row {i}".encode() for i in range(ROWS)])
    ck, marker = str(tmp_path / "ck"), tmp_path / "holding"
    log1 = tmp_path / "driver1.log"

    first = _driver([broker.url, src, dst, ck, str(marker)], log1)
    try:
        wait_until(lambda: marker.exists() or first.poll() is not None, 240, "the sink's commit of batch 1")
        assert marker.exists(), log1.read_text()[-3000:]
        assert broker.end(dst) == 2000  # batches 0 and 1 published and confirmed, batch 1 not committed
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL
    assert not (Path(ck) / "commits" / "1").exists() and (Path(ck) / "offsets" / "1").exists()

    # the restart: the same query on the suite's session (a driver of its own would only add a JVM)
    again = copy_query(spark, broker.url, src, dst, ck)
    again.awaitTermination(300)
    assert again.exception() is None, again.exception()
    expected = {f"ROW {i}".encode() for i in range(ROWS)}
    end = broker.end(dst)
    got = broker.read_all(dst, end)
    counts = Counter(body for _, body, _ in got)
    assert set(counts) == expected  # every row arrived
    if broker.dedup:
        assert end == ROWS and max(counts.values()) == 1  # exactly once
    else:  # at-least-once: batch 1 (rows 1000..1999) was published again by the replay
        assert end == ROWS + 1000
        assert {b for b, n in counts.items() if n == 2} == {f"ROW {i}".encode() for i in range(1000, 2000)}
