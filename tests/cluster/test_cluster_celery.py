"""Celery 5 with quorum queues (``task_default_queue_type="quorum"``) on three nodes, worker and
client given every node in a multi-host ``broker_url``: the tasks run, and keep running through a
kill -9 of the node that leads the task queue (acks late: a task in progress comes back)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import celery
import kombu.exceptions
from clusterkit import LEASE, Node, Nodes, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2ekit import celery_worker  # noqa: E402

APP = """
import os
import time
from celery import Celery

app = Celery("qclapp", broker=os.environ["SANSMQ_BROKER_URL"])
app.conf.update(broker_connection_retry_on_startup=True, task_acks_late=True, worker_hijack_root_logger=False,
                task_default_queue="cluster-tasks", task_default_queue_type="quorum",
                worker_detect_quorum_queues=True, worker_prefetch_multiplier=2)


@app.task
def record(i):
    time.sleep(0.05)
    with open(os.environ["QCLAPP_DONE"], "a") as f:
        f.write(f"{i}\\n")
"""


def _url(*nodes: Node) -> str:
    return ";".join(f"amqp://guest:guest@127.0.0.1:{n.amqp}//" for n in nodes)


def _done(path: Path) -> set[int]:
    return {int(line) for line in path.read_text().split()} if path.exists() else set()


def _send(client: celery.Celery, ids: range) -> None:
    """Send each task, again while a node refuses it (nacked: its queue's leader just went away)."""
    for i in ids:
        deadline = time.monotonic() + LEASE * 10
        while True:
            try:
                client.send_task("qclapp.record", (i,))
                break
            except (kombu.exceptions.OperationalError, OSError, Exception) as exc:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise AssertionError(f"task {i} never sent: {exc!r}") from exc
                time.sleep(0.2)


def test_celery_quorum_tasks_survive_kill_9_of_the_task_queues_leader(nodes: Nodes, tmp_path: Path) -> None:
    a, b, c = nodes.start("a", "b", "c")
    (tmp_path / "qclapp.py").write_text(APP)
    done = tmp_path / "done.txt"
    env = dict(os.environ, SANSMQ_BROKER_URL=_url(a, b, c), QCLAPP_DONE=str(done), PYTHONPATH=str(tmp_path))
    client = celery.Celery("qclapp", broker=_url(b, c, a))
    client.conf.update(task_default_queue="cluster-tasks", task_default_queue_type="quorum",
                       broker_transport_options={"confirm_publish": True}, broker_connection_retry_on_startup=True)
    with celery_worker("qclapp", tmp_path, env), contextlib.closing(client):
        # the worker (on a, its first host) declares the quorum queue: a leads it
        wait_for(lambda: nodes.leader("cluster-tasks"), timeout=30, what="the worker's declare")
        assert nodes.leader("cluster-tasks") == ("a", 1)
        assert b.api("queues/%2F/cluster-tasks")["type"] == "quorum"
        _send(client, range(40))  # through b: forwarded to a
        wait_for(lambda: len(_done(done)) >= 10, timeout=60, what="10 tasks done")
        a.kill()  # mid-way: the worker holds unacked tasks on a
        wait_for(lambda: (lead := nodes.leader("cluster-tasks")) and lead[0] != "a", timeout=LEASE * 5,
                 what="a new leader of the task queue")
        _send(client, range(40, 60))
        with contextlib.suppress(AssertionError):
            wait_for(lambda: _done(done) >= set(range(60)), timeout=120, what="every task done")
    assert _done(done) == set(range(60)), sorted(set(range(60)) - _done(done))
