"""pika: the byte-bounded range of a stream on a passive queue.declare (a sansmq extension,
capability ``stream_range_bytes``), on each server and durable store: the answer in message_count,
its bounds (at least one record, never past the end, a start retention removed), and the 406s for
bad arguments that close only the asking channel."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pika
import pytest
from targets import Target, pg_url, refused, sansmq_only, target

from engine.records import _encode_message
from engine.streams.memory import RECORD_OVERHEAD

__all__ = ["pg_url", "target"]  # the fixtures this module's tests use

_names = itertools.count()
BODY = 1000


def stream(ch: Any, **args: Any) -> str:
    name = f"range-{os.getpid()}-{next(_names)}"
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **args})
    return name


def fill(ch: Any, q: str, n: int) -> None:
    ch.confirm_delivery()
    for _ in range(n):
        ch.basic_publish("", q, b"x" * BODY, pika.BasicProperties(delivery_mode=2))


def range_end(ch: Any, q: str, start: Any, budget: Any) -> int:
    ok = ch.queue_declare(q, passive=True, arguments={"x-stream-range-start": start, "x-stream-range-bytes": budget})
    return int(ok.method.message_count)


def test_a_passive_declare_answers_the_end_of_a_range_that_fits_the_bytes(target: Target) -> None:
    sansmq_only(target, "RabbitMQ ignores a passive declare's arguments")
    conn = target.conn()
    assert conn._impl.server_properties["capabilities"]["stream_range_bytes"] is True
    ch = conn.channel()
    q = stream(ch)
    fill(ch, q, 20)
    assert ch.queue_declare(q, passive=True).method.message_count == 20  # without the arguments: the end
    # the record a pika publish stores: segment files add 4 bytes of filter field, PostgreSQL none
    low = BODY + RECORD_OVERHEAD
    assert range_end(ch, q, 0, 5 * low - 1) in (4, 5)
    assert range_end(ch, q, 0, 3 * (low + 100)) == 3  # whatever the framing, 3 fit and 4 do not
    assert range_end(ch, q, 7, 3 * (low + 100)) == 10
    assert range_end(ch, q, 0, 1) == 1  # at least one record
    assert range_end(ch, q, 18, 10**9) == 20  # never past the end
    assert range_end(ch, q, 20, 10**9) == 20  # nothing to read
    conn.close()


def test_a_start_that_retention_removed_counts_from_the_first_kept(target: Target) -> None:
    sansmq_only(target, "RabbitMQ ignores a passive declare's arguments")
    conn = target.conn()
    ch = conn.channel()
    q = stream(ch, **{"x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000})
    fill(ch, q, 60)
    size = len(_encode_message(_plain())) + RECORD_OVERHEAD  # a lower bound of any store's record
    first = range_end(ch, q, 0, 1) - 1  # one record: the first kept
    assert first > 0
    assert range_end(ch, q, 0, 2 * size + 100) - first == 2
    conn.close()


def _plain() -> Any:
    from engine._message import Message

    return Message(0, "", "q", {}, b"x" * BODY, persistent=True)


@pytest.mark.parametrize("args, fragment", [
    ({"x-stream-range-start": 0}, "'x-stream-range-bytes'"),
    ({"x-stream-range-bytes": 100}, "'x-stream-range-start'"),
    ({"x-stream-range-start": -1, "x-stream-range-bytes": 100}, "'x-stream-range-start'"),
    ({"x-stream-range-start": 0, "x-stream-range-bytes": 0}, "'x-stream-range-bytes'"),
    ({"x-stream-range-start": 0, "x-stream-range-bytes": "100"}, "'x-stream-range-bytes'"),
])
def test_bad_arguments_are_a_406_on_the_asking_channel_only(target: Target, args: dict[str, Any],
                                                             fragment: str) -> None:
    sansmq_only(target, "RabbitMQ ignores a passive declare's arguments")
    conn = target.conn()
    ch = conn.channel()
    q = stream(ch)
    fill(ch, q, 3)
    code, text = refused(target, lambda c: c.queue_declare(q, passive=True, arguments=args))
    assert code == 406 and fragment in text, text
    assert ch.queue_declare(q, passive=True).method.message_count == 3  # the other channel lives on
    conn.close()


def test_a_range_of_a_queue_that_is_not_a_stream_is_a_406(target: Target) -> None:
    sansmq_only(target, "RabbitMQ ignores a passive declare's arguments")
    conn = target.conn()
    ch = conn.channel()
    name = f"classic-{os.getpid()}-{next(_names)}"
    ch.queue_declare(name, durable=True)
    code, text = refused(target, lambda c: c.queue_declare(
        name, passive=True, arguments={"x-stream-range-start": 0, "x-stream-range-bytes": 10}))
    assert code == 406 and "is not a stream" in text, text
    ch.queue_delete(name)
    conn.close()
