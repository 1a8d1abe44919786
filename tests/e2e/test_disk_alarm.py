"""The disk alarm on a real server: the disk monitor samples the data directory, a limit above the
free space blocks pika's publisher (connection.blocked "low on disk") and shows in the management
API and Prometheus; lowering the limit (rabbitmqctl set_disk_free_limit's equivalent) clears it."""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pytest
from e2ekit import ServerProcess, fresh_data_dir, ops_server, wait_until
from prometheus_client.parser import text_string_to_metric_families

from engine import Config
from servers import SERVER_KINDS
from servers._disk import DiskMonitor
from servers.management import OPS_EPHEMERAL

#: far above any disk's free space
HUGE = 10**18


def get(port: int, path: str) -> tuple[int, Any]:
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    try:
        with urllib.request.urlopen(rq, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def gauge(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_low_disk_blocks_a_pika_publisher_then_clears(tmp_path: Path) -> None:
    with ops_server(Config(disk_free_limit=HUGE)) as (r, ops):
        disk = DiskMonitor(r.server, str(tmp_path), interval=0.05)
        events: list[str] = []
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", r.address("amqp")[1]))
        try:
            conn.add_on_connection_blocked_callback(lambda _c, m: events.append(f"blocked: {m.method.reason}"))
            conn.add_on_connection_unblocked_callback(lambda _c, m: events.append("unblocked"))
            ch = conn.channel()
            ch.queue_declare("disk-q")
            ch.basic_publish("", "disk-q", b"before")  # a publisher: the alarm blocks it
            conn.process_data_events(0.1)
            assert events == []
            http, prom = ops.bound["http"][1], ops.bound["prometheus"][1]
            assert get(http, "/api/health/checks/alarms") == (200, {"status": "ok"})
            disk.start()
            wait_until(lambda: conn.process_data_events(0.05) or events, 10, "connection.blocked")
            assert events == ["blocked: low on disk"]
            status, body = get(http, "/api/health/checks/alarms")
            assert status == 503 and body["alarms"] == [{"resource": "disk", "node": "sansmq@localhost"}]
            node = get(http, "/api/nodes")[1][0]
            assert node["disk_free_alarm"] is True and node["disk_free_limit"] == HUGE
            assert 0 < node["disk_free"] < HUGE
            assert gauge(prom, "rabbitmq_alarms_free_disk_space_watermark") == 1
            assert gauge(prom, "rabbitmq_disk_space_available_limit_bytes") == HUGE
            assert 0 < gauge(prom, "rabbitmq_disk_space_available_bytes") < HUGE
            r.admin(lambda b: b.set_disk_free_limit(1, time.time()))
            wait_until(lambda: conn.process_data_events(0.05) or len(events) == 2, 10, "connection.unblocked")
            assert events[1] == "unblocked"
            assert get(http, "/api/health/checks/alarms") == (200, {"status": "ok"})
            assert gauge(prom, "rabbitmq_alarms_free_disk_space_watermark") == 0
            ch.basic_publish("", "disk-q", b"after")
            assert ch.queue_declare("disk-q", passive=True).method.message_count == 2
        finally:
            conn.close()
            disk.stop()


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_serve_disk_free_limit_flag_raises_the_alarm(kind: str) -> None:
    cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", kind, "--stomp", "127.0.0.1:0",
           "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir(), "--disk-free-limit", "1000000TB"]
    srv = ServerProcess(cmd, kind)
    try:
        port = srv.port("http")
        status, body = wait_until(lambda: (res := get(port, "/api/health/checks/alarms"))[0] == 503 and res,
                                  10, "the disk alarm")
        assert body["alarms"][0]["resource"] == "disk"
        wait_until(lambda: any("disk alarm set" in line for line in srv.lines), 5, "the alarm's log line")
    finally:
        assert srv.terminate() == 0
