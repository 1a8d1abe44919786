"""The management and Prometheus listeners under descriptor pressure and when their loop dies,
over real sockets: they poll (a descriptor above 1,023 does not kill them), a death is logged and
fails RabbitMQ's listener health checks, and the fd figures and alarms are exported."""

from __future__ import annotations

import base64
import json
import logging
import os
import resource
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from e2ekit import ServerProcess, fresh_data_dir, ops_server, wait_until
from prometheus_client.parser import text_string_to_metric_families
from waitress import wasyncore

from servers.management import OPS_EPHEMERAL, OpsListeners

#: descriptors opened so that the listeners' next ones are above select()'s 1,023
FILLERS = 1100


@dataclass
class Ops:
    ops: OpsListeners

    def port(self, name: str) -> int:
        return self.ops.bound[name][1]

    def get(self, path: str, listener: str = "http", timeout: float = 5.0) -> tuple[int, Any]:
        auth = "Basic " + base64.b64encode(b"guest:guest").decode()
        rq = urllib.request.Request(f"http://127.0.0.1:{self.port(listener)}{path}", headers={"Authorization": auth})
        try:
            with urllib.request.urlopen(rq, timeout=timeout) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        return status, json.loads(text) if text.startswith(b"{") or text.startswith(b"[") else text.decode()


@pytest.fixture()
def ops() -> Iterator[Ops]:
    with ops_server() as (_, listeners):
        yield Ops(listeners)


def metric(text: str, name: str) -> float:
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_listeners_answer_on_descriptors_above_1023(ops: Ops) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= FILLERS + 200, f"this test needs a hard RLIMIT_NOFILE above {FILLERS + 200} (have {hard})"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    before = len(os.listdir("/proc/self/fd"))
    fillers = [socket.socket() for _ in range(FILLERS)]
    try:
        assert min(s.fileno() for s in fillers[-10:]) > 1024
        for _ in range(3):  # each request: a new connection, so a descriptor above 1,024 in the listener
            assert ops.get("/api/overview")[0] == 200
            assert ops.get("/metrics", "prometheus")[0] == 200
        status, nodes = ops.get("/api/nodes")
        assert status == 200 and nodes[0]["fd_used"] >= before + FILLERS and nodes[0]["fd_total"] == hard
        text = ops.get("/metrics", "prometheus")[1]
        assert metric(text, "rabbitmq_process_open_fds") >= before + FILLERS
        assert metric(text, "rabbitmq_process_max_fds") == hard
        assert metric(text, "rabbitmq_alarms_file_descriptor_limit") == 0
    finally:
        for s in fillers:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert ops.get(f"/api/health/checks/port-listener/{ops.port('prometheus')}") == (
        200, {"status": "ok", "port": ops.port("prometheus")})
    assert not ops.ops.failed


class _Broken(wasyncore.dispatcher):
    """Makes the loop it is put in raise (as select() did past 1,023): the listener's death."""

    def __init__(self) -> None:
        super().__init__()

    def readable(self) -> bool:
        raise RuntimeError("injected failure")


def test_a_dead_listener_is_logged_and_fails_the_health_checks(ops: Ops, caplog: pytest.LogCaptureFixture) -> None:
    port = ops.port("prometheus")
    assert ops.get(f"/api/health/checks/port-listener/{port}")[0] == 200
    assert ops.get("/api/health/checks/protocol-listener/prometheus") == (
        200, {"status": "ok", "protocol": "prometheus"})
    server = ops.ops._servers["prometheus"]
    with caplog.at_level(logging.ERROR, "sansmq"):
        server._map[-1] = _Broken()
        server.trigger.pull_trigger()
        wait_until(lambda: "prometheus" in ops.ops.failed, 10, "the listener's death to be recorded")
    assert any(r.levelno == logging.ERROR and "prometheus listener failed" in r.getMessage() and
               "injected failure" in r.getMessage() for r in caplog.records)
    status, body = ops.get(f"/api/health/checks/port-listener/{port}")
    assert status == 503 and body["status"] == "failed" and body["missing"] == port
    status, body = ops.get("/api/health/checks/protocol-listener/prometheus")
    assert status == 503 and body["reason"] == "No active listener" and "prometheus" not in body["protocols"]
    assert "prometheus" in ops.get("/api/nodes")[1][0]["listeners_failed"]
    assert ops.get(f"/api/health/checks/port-listener/{ops.port('http')}")[0] == 200  # the others live on


def test_unknown_listener_checks_fail(ops: Ops) -> None:
    assert ops.get("/api/health/checks/protocol-listener/mqtt")[0] == 503
    assert ops.get("/api/health/checks/port-listener/1")[0] == 503
    assert ops.get("/api/health/checks/protocol-listener/amqp")[0] == 200


def test_serve_raises_its_soft_descriptor_limit_and_logs_it() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard > 1024, f"this test needs a hard RLIMIT_NOFILE above 1024 (have {hard})"
    cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0",
           "--amqp", "127.0.0.1:0", "--data", fresh_data_dir()]
    srv = ServerProcess(cmd, "threads", preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
    try:
        assert any(f"open file limit: {hard} descriptors" in line for line in srv.lines)
        url = f"http://127.0.0.1:{srv.port('prometheus')}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        assert metric(text, "rabbitmq_process_max_fds") == hard
        assert 0 < metric(text, "rabbitmq_process_open_fds") < 200
    finally:
        assert srv.terminate() == 0



def test_the_file_descriptor_alarm_follows_the_limit(ops: Ops) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert metric(ops.get("/metrics", "prometheus")[1], "rabbitmq_alarms_file_descriptor_limit") == 0
    assert ops.get("/api/health/checks/alarms") == (200, {"status": "ok"})
    used = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 20, hard))  # within the alarm's reserve of 32
    try:
        assert metric(ops.get("/metrics", "prometheus")[1], "rabbitmq_alarms_file_descriptor_limit") == 1
        status, body = ops.get("/api/health/checks/alarms")
        assert status == 503 and [a["resource"] for a in body["alarms"]] == ["file_descriptor_limit"]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert ops.get("/api/health/checks/alarms")[0] == 200
