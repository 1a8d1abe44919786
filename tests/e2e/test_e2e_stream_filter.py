"""Stream filtering end to end (issue 28): pika and stomp.py against sansmq on each server and each
durable store, and opt-in against a real RabbitMQ (see test_e2e_streams). Publishers set
``x-stream-filter-value``; consumers ask with ``x-stream-filter`` / ``x-stream-match-unfiltered``.

RabbitMQ's broker-side filter is probabilistic (a Bloom filter per chunk): it delivers every match
and may deliver more, so on RabbitMQ these tests only check that every match arrives; sansmq
filters exactly, and that is checked on sansmq only."""

from __future__ import annotations

from typing import Any

import pytest
from targets import Target, pg_url, refused, restart, target
from test_e2e_streams import DECLARE, fresh, publish, read, stomp_error, stomp_read, sub_frame

__all__ = ["pg_url", "target"]

REGIONS = ("eu", "us", "asia")


def regional(t: Target, n: int = 30, **args: Any) -> tuple[str, dict[str, list[int]]]:
    """A new stream of ``n`` messages, region i % 3 (every fifth unfiltered); the offsets of each."""
    conn = t.conn()
    ch = conn.channel()
    q = fresh(t, ch, **args)
    where: dict[str, list[int]] = {r: [] for r in (*REGIONS, "none")}
    for i in range(n):
        region = "none" if i % 5 == 4 else REGIONS[i % 3]
        headers = None if region == "none" else {"x-stream-filter-value": region}
        publish(ch, q, [f"{region}-{i}".encode()], headers=headers)
        where[region].append(i)
    conn.close()
    return q, where


def check(t: Target, got: list[tuple[int, bytes]], want: list[int]) -> None:
    offsets = [o for o, _ in got]
    if t.rabbitmq:  # over-delivery allowed: every match arrives, in order
        assert [o for o in offsets if o in want] == want
    else:
        assert offsets == want


def test_pika_consumers_get_their_regions(target: Target) -> None:
    q, where = regional(target)
    eu = read(target, q, len(where["eu"]), extra={"x-stream-filter": "eu"}, timeout=5 if target.rabbitmq else 10)
    check(target, eu, where["eu"])
    assert all(b.startswith(b"eu-") for _, b in eu) or target.rabbitmq
    want = sorted(where["us"] + where["asia"] + where["none"])
    both = read(target, q, len(want), extra={"x-stream-filter": ["us", "asia"], "x-stream-match-unfiltered": True})
    check(target, both, want)
    if not target.rabbitmq:  # exact: nothing past the matches arrives
        assert read(target, q, 100, extra={"x-stream-filter": "eu"}, timeout=1) == eu


def test_stomp_publishers_and_subscribers_filter_with_headers(target: Target) -> None:
    q, where = regional(target, 15)
    got = stomp_read(target, q, len(where["asia"]) + len(where["none"]),
                     {"x-stream-offset": "first", "x-stream-filter": "asia", "x-stream-match-unfiltered": "true"})
    want = sorted(where["asia"] + where["none"])
    offsets = [o for o, _ in got]
    assert offsets == want if not target.rabbitmq else [o for o in offsets if o in want] == want


def test_bad_filter_arguments_are_refused(target: Target) -> None:
    q, where = regional(target, 5)
    for args, arg in (({"x-stream-filter": 5}, "x-stream-filter"),
                      ({"x-stream-filter": "eu", "x-stream-match-unfiltered": "yes"}, "x-stream-match-unfiltered")):
        def consume(ch: Any, args: dict[str, Any] = args) -> None:
            ch.basic_qos(prefetch_count=5)
            ch.basic_consume(q, lambda *a: None, arguments={"x-stream-offset": "first", **args})
        code, text = refused(target, consume)
        assert code == 406, (args, code, text)
        if not target.rabbitmq:
            assert f"'{arg}'" in text
    for size in (15, 256):
        code, text = refused(target, lambda ch, size=size: ch.queue_declare(
            f"{q}-f{size}", durable=True, arguments={"x-queue-type": "stream", "x-stream-filter-size-bytes": size}))
        assert code == 406 and "'x-stream-filter-size-bytes'" in text, (size, text)
    if not target.rabbitmq:
        stomp_error(target, sub_frame(f"/amq/queue/{q}", {"x-stream-filter": "eu", "x-stream-match-unfiltered": "maybe",
                                                          "prefetch-count": "10"}),
                    "invalid arg 'x-stream-match-unfiltered'")
        stomp_error(target, sub_frame(f"/queue/{q}-s", {**DECLARE, "x-stream-filter-size-bytes": "9",
                                                        "prefetch-count": "10"}),
                    "invalid arg 'x-stream-filter-size-bytes'")
    assert [o for o, _ in read(target, q, 5)] == list(range(5))  # the stream was not harmed


@pytest.mark.parametrize("kill", [True, False])
def test_filtering_survives_a_restart(target: Target, kill: bool) -> None:
    if target.rabbitmq:
        pytest.skip("restarts the sansmq server")
    q, where = regional(target, 30, **{"x-stream-filter-size-bytes": 32, "x-stream-max-segment-size-bytes": 400})
    conn = target.conn()
    publish(conn.channel(), fresh(target, conn.channel()), [b"sync-barrier"])
    conn.close()
    restart(target, kill=kill)
    got = read(target, q, 100, extra={"x-stream-filter": "us"}, timeout=2)  # exactly the matches, nothing more
    assert [o for o, _ in got] == where["us"] and all(b.startswith(b"us-") for _, b in got)
    conn = target.conn()  # appends after the restart are filtered too
    publish(conn.channel(), q, [b"us-late"], headers={"x-stream-filter-value": "us"})
    conn.close()
    got = read(target, q, len(where["us"]) + 1, extra={"x-stream-filter": "us"})
    assert [o for o, _ in got] == where["us"] + [30] and got[-1][1] == b"us-late"
