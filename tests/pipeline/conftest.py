"""Fixtures of the Spark pipeline suite: one SparkSession per test run, one broker.

The broker is a real ``sansmq serve`` subprocess (threads server) unless
``SANSMQ_RABBITMQ=host:port`` points the suite at a RabbitMQ node instead (opt-in, e.g. the private
node of rabbitmq-start.sh on 127.0.0.1:5682), where the sink is at-least-once: RabbitMQ has no
producer deduplication over AMQP 0-9-1, so the tests that need it expect duplicates there.

Spark needs Java 17 and the ``spark`` extra (scripts/test.sh installs both and sets
SANSMQ_REQUIRE_SPARK=1, so there a missing piece fails instead of skipping).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipelinekit import Broker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2ekit import ServerProcess, start_server  # noqa: E402

RABBITMQ = os.environ.get("SANSMQ_RABBITMQ")


def _spark_missing() -> str | None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed ({exc}); pip install -e '.[spark]'"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java on PATH (scripts/install-java.sh installs Debian's openjdk-17-jre-headless)"
    return None


@pytest.fixture(scope="session")
def spark_available() -> None:
    """Java and the spark extra are there (for tests that start their own Spark driver)."""
    reason = _spark_missing()
    if reason is not None:
        if os.environ.get("SANSMQ_REQUIRE_SPARK") == "1":
            pytest.fail(f"Spark tests required but not runnable: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def spark(spark_available: None) -> Iterator[object]:
    from pipeline.session import make_session

    session = make_session("local[2]", "sansmq-pipeline-tests", {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.stopTimeout": "30s",
    })
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    if RABBITMQ:
        yield Broker(f"amqp://guest:guest@{RABBITMQ}/%2F", dedup=False, name="rabbitmq", firehose=False)
        return
    cfg = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    cfg.write_text("")
    srv: ServerProcess = start_server("threads", cfg, "--trace", "/")  # the firehose, for the analytics test
    try:
        # port() waits for the listener's log line (the server may still be starting)
        yield Broker(f"amqp://guest:guest@127.0.0.1:{srv.port('amqp')}/%2F", dedup=True, name="sansmq", firehose=True)
    finally:
        srv.terminate()
