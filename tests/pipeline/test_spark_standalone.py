"""The pipeline on a standalone Spark cluster (a master and a worker started from the installed
pyspark, on loopback): the deployment docs/pipeline.md describes, with the package installed in the
executors' Python and the driver's host set for the executors to reach it. Reads and the streaming
copy run in the executor the worker launches, a JVM other than the driver's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2ekit import wait_until
from pipelinekit import Broker

JOB = Path(__file__).with_name("standalone_job.py")
ROWS = 2500


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([_spark_class(), *args], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def master(spark_available: None, tmp_path: Path) -> Iterator[str]:
    """spark://127.0.0.1:PORT of a master with one worker (2 cores) registered."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable)
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    mlog, wlog = tmp_path / "master.log", tmp_path / "worker.log"
    procs = [_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                      "--webui-port", str(_free_port())], mlog, env)]
    try:
        wait_until(lambda: "I have been elected leader" in mlog.read_text() or procs[0].poll() is not None, 120,
                   "the Spark master")
        assert procs[0].poll() is None, mlog.read_text()[-3000:]
        procs.append(_daemon(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                              "--memory", "1g", "--webui-port", str(_free_port()), url], wlog, env))
        wait_until(lambda: "Successfully registered with master" in wlog.read_text() or procs[1].poll() is not None,
                   120, "the Spark worker")
        assert procs[1].poll() is None, wlog.read_text()[-3000:]
        yield url
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp_path / "work", ignore_errors=True)


def test_a_standalone_cluster_reads_and_copies_a_stream_in_its_executors(master: str, broker: Broker,
                                                                           tmp_path: Path) -> None:
    src, dst = broker.stream("pipe-sa-src"), broker.stream("pipe-sa-dst")
    broker.publish(src, [f"row {i}".encode() for i in range(ROWS)])
    log = tmp_path / "driver.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    job = subprocess.run([sys.executable, str(JOB), master, broker.url, src, dst, str(tmp_path / "ck")],
                         stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, timeout=600)
    out = log.read_text()
    assert job.returncode == 0, out[-4000:]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert result == {"count": ROWS, "executors": 1}
    copied = broker.read_all(dst, ROWS)
    assert sorted(body for _, body, _ in copied) == sorted(f"ROW {i}".encode() for i in range(ROWS))
