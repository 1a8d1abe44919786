"""End to end: a real `sansmq serve` subprocess and pika. 100k messages published to a queue nobody
consumes go to the segment files (the broker keeps a small window in memory), then are drained in
order."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2ekit import start_server  # noqa: E402

N = 100_000
CONFIG = """
[limits]
heartbeat = [250, 500]
queue_window = 1000
"""


def _segment_bytes(srv) -> int:
    data = srv.proc.args[srv.proc.args.index("--data") + 1]
    seg = Path(data) / "segments"
    return sum(f.stat().st_size for f in seg.iterdir())


def test_100k_backlog_is_paged_and_drained_in_order(tmp_path: Path) -> None:
    cfg = tmp_path / "sansmq.toml"
    cfg.write_text(CONFIG)
    srv = start_server("asyncio", cfg)
    try:
        # the amqp listener's line may follow the first one a little later: wait for it
        params = pika.ConnectionParameters("127.0.0.1", srv.port("amqp"),
                                           credentials=pika.PlainCredentials("guest", "guest"),
                                           connection_attempts=1, socket_timeout=10)
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.queue_declare("backlog", durable=True)
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(N):  # every other message persistent: both kinds of page records
            ch.basic_publish("", "backlog", b"%07d" % i + b"." * 93, persistent if i % 2 else None)
        deadline = time.monotonic() + 120
        while (n := ch.queue_declare("backlog", passive=True).method.message_count) < N:
            assert time.monotonic() < deadline, n
            time.sleep(0.05)
        assert n == N
        # the backlog is in the segment files (100 bytes of body per message plus record headers)
        assert _segment_bytes(srv) > N * 100
        ch.basic_qos(prefetch_count=500)
        got: list[int] = []
        last_tag = 0
        for method, _, body in ch.consume("backlog", inactivity_timeout=20):
            assert method is not None, f"stalled after {len(got)} messages"
            got.append(int(body[:7]))
            last_tag = method.delivery_tag
            if len(got) % 250 == 0:
                ch.basic_ack(last_tag, multiple=True)
            if len(got) == N:
                break
        if len(got) % 250:
            ch.basic_ack(last_tag, multiple=True)
        ch.cancel()
        assert got == list(range(N))
        assert ch.queue_declare("backlog", passive=True).method.message_count == 0
        conn.close()
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
    assert not any("Traceback" in line for line in srv.lines), srv.lines[-40:]


def _drain(ch, queue: str, want: int) -> list[int]:
    """Consume ``want`` messages (prefetch 500, acked in batches of 250); their numbers, in order."""
    ch.basic_qos(prefetch_count=500)
    got: list[int] = []
    last_tag = 0
    for method, _, body in ch.consume(queue, inactivity_timeout=20):
        assert method is not None, f"stalled after {len(got)} messages"
        got.append(int(body[:7]))
        last_tag = method.delivery_tag
        if len(got) % 250 == 0 or len(got) == want:
            ch.basic_ack(last_tag, multiple=True)
        if len(got) == want:
            break
    ch.cancel()
    return got


def test_a_backlog_in_packed_index_blocks_survives_sigkill_after_acks_across_blocks(tmp_path: Path) -> None:
    """12,000 persistent messages are three sealed (packed) index blocks and an open one; 5,000 are
    consumed and acked (the acks cross a block boundary), a confirmed publish makes the acks durable,
    then SIGKILL: the restarted server, which rebuilds the blocks from the journal, delivers exactly
    the other 7,000, in order."""
    cfg = tmp_path / "sansmq.toml"
    cfg.write_text(CONFIG)
    data = tmp_path / "data"
    n, acked = 12_000, 5_000
    srv = start_server("asyncio", cfg, "--data", str(data))
    params = pika.ConnectionParameters("127.0.0.1", srv.port("amqp"),
                                       credentials=pika.PlainCredentials("guest", "guest"),
                                       connection_attempts=1, socket_timeout=10)
    try:
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.queue_declare("backlog", durable=True)
        ch.queue_declare("marker", durable=True)
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(n):
            ch.basic_publish("", "backlog", b"%07d" % i + b"." * 93, persistent)
        confirmed = conn.channel()
        confirmed.confirm_delivery()
        # same connection, so handled after the 12,000: its confirm waits for a sync covering them
        confirmed.basic_publish("", "marker", b"m", persistent)
        assert _drain(ch, "backlog", acked) == list(range(acked))
        confirmed.basic_publish("", "marker", b"m", persistent)  # its sync makes the acks durable
    finally:
        srv.proc.kill()
        srv.proc.wait()
    srv = start_server("asyncio", cfg, "--data", str(data))
    try:
        params.port = srv.port("amqp")
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        assert ch.queue_declare("backlog", passive=True).method.message_count == n - acked
        assert _drain(ch, "backlog", n - acked) == list(range(acked, n))
        assert ch.queue_declare("backlog", passive=True).method.message_count == 0
        conn.close()
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
    assert not any("Traceback" in line for line in srv.lines), srv.lines[-40:]
