"""A Celery app over the AMQP listener: a real worker process runs 200 tasks, results come back
through the rpc:// backend (kombu on py-amqp), against each server."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import celery
import pytest
from e2ekit import celery_worker

import servers

APP = '''
import os
from celery import Celery

app = Celery("celapp", broker=os.environ["SANSMQ_BROKER_URL"], backend="rpc://")
app.conf.update(broker_connection_retry_on_startup=True, task_acks_late=True,
                worker_prefetch_multiplier=4, worker_hijack_root_logger=False)


@app.task
def add(x, y):
    return x + y
'''


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_celery_worker_runs_200_tasks_with_results(kind: str, tmp_path: Path) -> None:
    (tmp_path / "celapp.py").write_text(APP)
    with servers.running(kind, [("amqp", "127.0.0.1", 0)]) as srv:
        host, port = srv.address("amqp")
        url = f"amqp://guest:guest@{host}:{port}//"
        env = dict(os.environ, SANSMQ_BROKER_URL=url, PYTHONPATH=str(tmp_path))
        client = celery.Celery("celapp", broker=url, backend="rpc://")
        with celery_worker("celapp", tmp_path, env), contextlib.closing(client):
            results = [client.send_task("celapp.add", (i, i)) for i in range(200)]
            assert [r.get(timeout=60) for r in results] == [2 * i for i in range(200)]
