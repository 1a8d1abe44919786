"""Quorum queues on one node end to end (issue 24): pika, aio-pika, stomp.py, a Celery worker with
``task_default_queue_type = "quorum"`` and the management API, against sansmq on each server and
each durable store (segment files, PostgreSQL), and opt-in against a real RabbitMQ 3.10:

    SANSMQ_RABBITMQ=127.0.0.1:5682 SANSMQ_RABBITMQ_STOMP=127.0.0.1:61623 SANSMQ_RABBITMQ_HTTP=127.0.0.1:15672 \\
        .venv/bin/python -m pytest tests/e2e/test_e2e_quorum.py -k "rabbitmq]"

Skipped there, with the reason: the default delivery limit (RabbitMQ 4's 20; 3.10 has none) and
restarts (only sansmq's server is restarted)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aio_pika
import celery
import pika
import pytest
from e2ekit import celery_worker
from targets import Target, pg_url, refused, restart, sansmq_only, stomp_conn, target

__all__ = ["pg_url", "target"]  # the fixtures this module's tests use

QUORUM = {"x-queue-type": "quorum"}
_names = itertools.count()


def fresh(t: Target, ch: Any, prefix: str = "qq", **args: Any) -> str:
    name = f"{prefix}-{os.getpid()}-{next(_names)}"
    ch.queue_declare(name, durable=True, arguments={**QUORUM, **args})
    return name


def with_dead_letters(t: Target, ch: Any, **args: Any) -> tuple[str, str]:
    """A quorum queue dead-lettering through the default exchange into a fresh classic queue."""
    dead = f"dead-{os.getpid()}-{next(_names)}"
    ch.queue_declare(dead, durable=True)
    work = fresh(t, ch, "work", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead, **args})
    return work, dead


def get(ch: Any, queue: str, timeout: float = 5.0) -> tuple[Any, Any, bytes] | None:
    """basic.get until a message comes (a nack's requeue may land a moment later) or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        m, p, b = ch.basic_get(queue)
        if m is not None or time.monotonic() >= deadline:
            return None if m is None else (m, p, b)
        time.sleep(0.02)


# -- declaring -----------------------------------------------------------------------------------------
def test_declare_refuses_what_rabbitmq_refuses(target: Target) -> None:
    n = f"qq-bad-{os.getpid()}"
    for kw, prop in ((dict(durable=False), "non-durable"), (dict(durable=True, exclusive=True), "exclusive-owner"),
                     (dict(durable=True, auto_delete=True), "auto-delete")):
        code, text = refused(target, lambda ch, kw=kw: ch.queue_declare(n, arguments=QUORUM, **kw))
        assert (code, text) == (406, f"PRECONDITION_FAILED - invalid property '{prop}' for queue '{n}' in vhost '/'")
    for arg, value in (("x-max-priority", 5), ("x-queue-mode", "lazy"), ("x-queue-master-locator", "min-masters"),
                       ("x-max-age", "1D")):
        code, text = refused(target, lambda ch, arg=arg, value=value: ch.queue_declare(
            n, durable=True, arguments={**QUORUM, arg: value}))
        assert (code, text) == (406, f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{n}' in vhost '/' of "
                                     "queue type rabbit_quorum_queue")
    code, text = refused(target, lambda ch: ch.queue_declare(
        n, durable=True, arguments={**QUORUM, "x-dead-letter-strategy": "sometimes"}))
    assert (code, text) == (406, f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for queue '{n}' in "
                                 "vhost '/': invalid_dlx_strategy")
    code, text = refused(target, lambda ch: ch.queue_declare(n, durable=True, arguments={
        "x-quorum-initial-group-size": 3}))
    assert (code, text) == (406, f"PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue '{n}' "
                                 "in vhost '/' of queue type rabbit_classic_queue")
    code, text = refused(target, lambda ch: ch.queue_declare("", durable=True, arguments=QUORUM))
    assert (code, text) == (406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type "
                                 "rabbit_quorum_queue")


def test_arguments_a_quorum_queue_takes_and_redeclares(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    args = {"x-max-length": 5, "x-max-length-bytes": 1000, "x-overflow": "reject-publish", "x-expires": 600000,
            "x-message-ttl": 60000, "x-delivery-limit": 3, "x-dead-letter-exchange": "",
            "x-dead-letter-strategy": "at-least-once", "x-quorum-initial-group-size": 3,
            "x-single-active-consumer": True}
    q = fresh(target, ch, **args)
    ch.queue_declare(q, durable=True, arguments={**QUORUM, **args})  # the same again: fine
    conn.close()
    code, text = refused(target, lambda ch: ch.queue_declare(q, durable=True, arguments={
        **QUORUM, **args, "x-delivery-limit": 4}))
    assert (code, text) == (406, f"PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue '{q}' in "
                                 "vhost '/': received '4' but current is '3'")
    code, text = refused(target, lambda ch: ch.queue_declare(q, durable=True))  # RabbitMQ's order of comparison
    assert (code, text) == (406, f"PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue '{q}' "
                                 "in vhost '/': received none but current is the value '' of type 'longstr'")
    conn = target.conn()
    plain = fresh(target, conn.channel())
    conn.close()
    code, text = refused(target, lambda ch: ch.queue_declare(plain, durable=True))
    assert (code, text) == (406, f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{plain}' in "
                                 "vhost '/': received none but current is the value 'quorum' of type 'longstr'")


def test_global_qos_consumer_is_refused(target: Target) -> None:
    conn = target.conn()
    q = fresh(target, conn.channel())
    conn.close()

    def consume(ch: Any) -> None:
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.basic_consume(q, lambda *a: None)

    assert refused(target, consume) == (540, f"NOT_IMPLEMENTED - queue '{q}' in vhost '/' does not support global qos")


# -- the delivery limit ------------------------------------------------------------------------------
def test_delivery_limit_dead_letters_with_the_delivery_count(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    work, dead = with_dead_letters(target, ch, **{"x-delivery-limit": 2})
    ch.confirm_delivery()
    ch.basic_publish("", work, b"poison", pika.BasicProperties(headers={"app": "x"}))
    seen: list[tuple[bool, Any]] = []

    def on(c: Any, m: Any, p: Any, b: bytes) -> None:  # a consumer that always fails
        seen.append((m.redelivered, p.headers))
        c.basic_nack(m.delivery_tag, requeue=True)

    ch.basic_consume(work, on)
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.3)  # nothing more comes
    assert seen == [(False, {"app": "x"}), (True, {"app": "x", "x-delivery-count": 1}),
                    (True, {"app": "x", "x-delivery-count": 2})]
    got = get(ch, dead)
    assert got is not None
    _, props, body = got
    assert body == b"poison" and props.headers["x-first-death-reason"] == "delivery_limit"
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", work, 1)
    assert "x-delivery-count" not in props.headers
    conn.close()


def test_returns_by_cancel_and_channel_close_count_too(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"m")
    other = conn.channel()
    got: list[Any] = []
    tag = other.basic_consume(q, lambda c, m, p, b: got.append(p.headers))
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    other.basic_cancel(tag)  # cancelled with it unacked
    other.close()
    m = get(ch, q)
    assert m is not None and got == [None]
    assert m[0].redelivered and m[1].headers["x-delivery-count"] >= 1
    conn.close()


def test_default_delivery_limit_is_twenty(target: Target) -> None:
    sansmq_only(target, "RabbitMQ 4's default x-delivery-limit of 20; RabbitMQ 3.10 has no default")
    conn = target.conn()
    ch = conn.channel()
    work, dead = with_dead_letters(target, ch)
    ch.confirm_delivery()
    ch.basic_publish("", work, b"p")
    counts = []
    for _ in range(21):
        got = get(ch, work)
        assert got is not None
        counts.append(got[1].headers["x-delivery-count"])
        ch.basic_reject(got[0].delivery_tag, requeue=True)
    assert counts == list(range(21))
    assert get(ch, dead) is not None and get(ch, work, timeout=0.3) is None
    conn.close()


# -- durability ----------------------------------------------------------------------------------------
def test_transient_messages_and_delivery_counts_survive_kill_9(target: Target) -> None:
    sansmq_only(target, "restarts the sansmq server")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch, **{"x-delivery-limit": 10})
    classic = f"classic-{q}"
    ch.queue_declare(classic, durable=True)
    ch.confirm_delivery()
    for body in (b"a", b"b"):
        for dest in (q, classic):  # delivery mode 1: only the quorum queue keeps them
            ch.basic_publish("", dest, body, pika.BasicProperties(delivery_mode=1))
    for _ in range(3):  # "a" comes back three times (a return puts it where it was)
        got = get(ch, q)
        assert got is not None and got[2] == b"a"
        ch.basic_nack(got[0].delivery_tag, requeue=True)
    # confirmed after a sync that covers every write before it, the nacks' counts included
    ch.basic_publish("", classic, b"persistent", pika.BasicProperties(delivery_mode=2))
    conn.close()
    restart(target, kill=True)
    conn = target.conn()
    ch = conn.channel()
    a, b = get(ch, q), get(ch, q)
    assert a is not None and b is not None
    assert (a[2], a[0].redelivered, a[1].headers) == (b"a", True, {"x-delivery-count": 3})
    assert (b[2], b[1].headers) == (b"b", {"x-delivery-count": 0})
    assert ch.queue_declare(classic, durable=True).method.message_count == 1  # the persistent one
    conn.close()


# -- clients ------------------------------------------------------------------------------------------
def test_aio_pika_declares_and_sees_redeliveries(target: Target) -> None:
    async def run() -> tuple[list[Any], int]:
        conn = await aio_pika.connect(f"amqp://guest:guest@{target.amqp[0]}:{target.amqp[1]}/")
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=1)
            name = f"aio-{os.getpid()}-{next(_names)}"
            queue = await ch.declare_queue(name, durable=True, arguments={**QUORUM, "x-delivery-limit": 1})
            await ch.default_exchange.publish(aio_pika.Message(b"job"), routing_key=name)
            seen = []
            async with queue.iterator() as it:
                async for message in it:
                    seen.append((message.redelivered, (message.headers or {}).get("x-delivery-count")))
                    await message.nack(requeue=True)
                    if len(seen) == 2:
                        break
            await asyncio.sleep(0.3)
            left = await ch.declare_queue(name, durable=True, arguments={**QUORUM, "x-delivery-limit": 1})
            return seen, left.declaration_result.message_count

    seen, left = asyncio.run(run())
    assert seen == [(False, None), (True, 1)]
    assert left == 0  # the second return was over the limit: dropped (no dead-letter exchange)


CELERY_APP = """
import os
from celery import Celery

app = Celery("qapp", broker=os.environ["SANSMQ_BROKER_URL"], backend="rpc://")
app.conf.update(broker_connection_retry_on_startup=True, task_acks_late=True, worker_hijack_root_logger=False,
                task_default_queue=os.environ["QAPP_QUEUE"], task_default_queue_type="quorum",
                worker_detect_quorum_queues=True)


@app.task
def mul(x, y):
    return x * y
"""


def test_celery_with_quorum_queues_runs_tasks(target: Target, tmp_path: Path) -> None:
    (tmp_path / "qapp.py").write_text(CELERY_APP)
    queue = f"celery-qq-{os.getpid()}-{next(_names)}"
    url = f"amqp://guest:guest@{target.amqp[0]}:{target.amqp[1]}//"
    env = dict(os.environ, SANSMQ_BROKER_URL=url, QAPP_QUEUE=queue, PYTHONPATH=str(tmp_path))
    client = celery.Celery("qapp", broker=url, backend="rpc://")
    client.conf.update(task_default_queue=queue, task_default_queue_type="quorum")
    with celery_worker("qapp", tmp_path, env), contextlib.closing(client):
        results = [client.send_task("qapp.mul", (i, 3)) for i in range(50)]
        assert [r.get(timeout=60) for r in results] == [3 * i for i in range(50)]
    conn = target.conn()
    ok = conn.channel().queue_declare(queue, durable=True, arguments=QUORUM)
    assert ok.method.message_count == 0
    conn.close()
    if target.http is not None:  # Celery made it a quorum queue
        assert api(target, "GET", f"/api/queues/%2F/{queue}")["type"] == "quorum"


def test_stomp_declares_and_redelivers_with_the_count(target: Target) -> None:
    q = f"stomp-qq-{os.getpid()}-{next(_names)}"
    c, col = stomp_conn(target)
    c.send(f"/queue/{q}", "job", headers={**QUORUM, "durable": "true", "auto-delete": "false", "receipt": "r1"})
    col.wait_receipt("r1")
    c.subscribe(f"/amq/queue/{q}", "s", ack="client-individual", headers={"prefetch-count": "1"})
    first = col.wait_messages(1)[0]
    assert first.body == "job" and "x-delivery-count" not in first.headers
    c.nack(first.headers["ack"] if "ack" in first.headers else first.headers["message-id"], "s")
    again = col.wait_messages(2)[1]
    assert again.headers["x-delivery-count"] == "1" and again.headers["redelivered"] == "true"
    c.disconnect()
    conn = target.conn()
    ok = conn.channel().queue_declare(q, durable=True, arguments=QUORUM)
    assert ok.method.message_count == 1  # the unacked one went back when the connection closed
    conn.close()
    c, col = stomp_conn(target)
    c.send(f"/queue/{q}-nd", "m", headers={**QUORUM, "durable": "false"})
    col.wait(lambda: col.errors, what="an ERROR")
    assert "invalid property" in col.errors[0].headers.get("message", "") + col.errors[0].body
    c, col = stomp_conn(target)  # a SUBSCRIBE to /queue/ without the type redeclares it as classic: refused
    c.subscribe(f"/queue/{q}", "s2")
    col.wait(lambda: col.errors, what="an ERROR")
    assert f"inequivalent arg 'x-queue-type' for queue '{q}'" in col.errors[0].body


# -- management -----------------------------------------------------------------------------------------
def api(t: Target, method: str, path: str, body: Any = None) -> Any:
    if t.http is None:
        pytest.skip("no management address for this broker (SANSMQ_RABBITMQ_HTTP)")
    data = None if body is None else json.dumps(body).encode()
    rq = urllib.request.Request(f"http://{t.http[0]}:{t.http[1]}{path}", data=data, method=method, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(), "content-type": "application/json"})
    with urllib.request.urlopen(rq, timeout=10) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def test_management_lists_declares_and_exports_quorum_queues(target: Target) -> None:
    name = f"mgmt-qq-{os.getpid()}-{next(_names)}"
    api(target, "PUT", f"/api/queues/%2F/{name}", {"durable": True, "arguments": {**QUORUM, "x-delivery-limit": 4}})
    info = api(target, "GET", f"/api/queues/%2F/{name}")
    assert (info["type"], info["durable"], info["arguments"]) == ("quorum", True, {**QUORUM, "x-delivery-limit": 4})
    assert info["leader"] in info["members"]
    exported = [q for q in api(target, "GET", "/api/definitions")["queues"] if q["name"] == name]
    assert exported and exported[0]["arguments"] == {**QUORUM, "x-delivery-limit": 4}
    with pytest.raises(urllib.error.HTTPError) as exc:
        api(target, "PUT", f"/api/queues/%2F/{name}-nd", {"durable": False, "arguments": QUORUM})
    assert exc.value.code == 400 and b"non-durable" in exc.value.read()
    policy = f"qq-limit-{os.getpid()}"
    # apply-to "queues": RabbitMQ 3.10 has no "quorum_queues" (sansmq takes it: engine tests)
    api(target, "PUT", f"/api/policies/%2F/{policy}", {"pattern": f"^{name}$", "apply-to": "queues",
                                                       "definition": {"delivery-limit": 1}})
    try:
        deadline = time.monotonic() + 10
        while api(target, "GET", f"/api/queues/%2F/{name}").get("policy") != policy:
            assert time.monotonic() < deadline, "the policy never applied"
            time.sleep(0.1)
        conn = target.conn()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", name, b"m")
        for _ in range(2):  # the policy's lower limit: gone after its second return
            got = get(ch, name)
            assert got is not None
            ch.basic_nack(got[0].delivery_tag, requeue=True)
        assert get(ch, name, timeout=0.5) is None
        conn.close()
    finally:
        api(target, "DELETE", f"/api/policies/%2F/{policy}")


def test_at_least_once_keeps_a_dead_letter_until_a_queue_takes_it(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    dlx = f"later-{os.getpid()}-{next(_names)}"  # declared only after the message died
    work = fresh(target, ch, "alo", **{"x-dead-letter-exchange": dlx, "x-dead-letter-strategy": "at-least-once",
                                      "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", work, b"precious", pika.BasicProperties(delivery_mode=2))
    got = get(ch, work)
    assert got is not None
    ch.basic_reject(got[0].delivery_tag, requeue=False)
    assert get(ch, work, timeout=0.5) is None  # out of consumers' sight
    if target.http is not None:
        info = api(target, "GET", f"/api/queues/%2F/{work}")
        deadline = time.monotonic() + 15  # RabbitMQ's statistics lag a few seconds
        while info.get("messages_dlx") != 1 and time.monotonic() < deadline:
            time.sleep(0.5)
            info = api(target, "GET", f"/api/queues/%2F/{work}")
        assert (info["messages_dlx"], info["messages_ready"]) == (1, 0)
    ch.exchange_declare(dlx, "fanout", durable=True)
    dead = f"{dlx}-q"
    ch.queue_declare(dead, durable=True)
    ch.queue_bind(dead, dlx)
    sansmq_only(target, "RabbitMQ 3.10's dead-letter worker routes a kept dead letter again after 180 s, sansmq "
                        "after 10 s")
    got = get(ch, dead, timeout=15)
    assert got is not None and got[2] == b"precious" and got[1].headers["x-first-death-reason"] == "rejected"
    conn.close()
