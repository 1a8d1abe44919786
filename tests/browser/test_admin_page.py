"""The admin page in headless chromium against sansmq on each server: every page loads without
console errors and its actions work (tools/browser/admin_page.mjs walks them). Screenshots of each
step are kept under the test's tmp dir and, if SANSMQ_ARTIFACTS is set, copied there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pika
import pytest
from browserkit import CHROMIUM, NODE_DIR

from servers import SERVER_KINDS, running
from servers.management import OpsListeners

STEPS = ["login-wrong-password", "overview", "queues", "queue-publish-get", "queue-purge", "queue-delete",
         "exchanges", "connections-close", "users", "definitions"]


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_admin_page(kind: str, browser_ready: None, tmp_path: Path) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with running(kind, [("amqp", "127.0.0.1", 0)]) as r:
        ops = OpsListeners(r.server, ("127.0.0.1", 0), None)
        ops.start()
        try:
            # a client the connections page closes; traffic for the charts
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", r.address("amqp")[1]))
            ch = conn.channel()
            ch.queue_declare("ui-traffic")
            for _ in range(20):
                ch.basic_publish("", "ui-traffic", b"x")
            cmd = ["node", str(NODE_DIR / "admin_page.mjs"), f"http://127.0.0.1:{ops.bound['http'][1]}",
                   "guest", "guest", str(shots), "--chromium", CHROMIUM]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200,
                                  env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            assert lines, proc.stderr[-3000:]
            result = json.loads(lines[-1])
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                conn.process_data_events(5)
                conn.channel()
            assert closed.value.reply_code == 320
        finally:
            ops.stop()
            artifacts = os.environ.get("SANSMQ_ARTIFACTS")
            if artifacts:
                shutil.copytree(shots, Path(artifacts) / f"admin-page-{kind}", dirs_exist_ok=True)
    assert result["errors"] == [] and result["steps"] == STEPS, result
    assert len(list(shots.glob("*.png"))) == len(STEPS)
