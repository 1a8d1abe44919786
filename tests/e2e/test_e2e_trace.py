"""The firehose end to end: ``sansmq serve --trace /`` on each server, pika publishing and
consuming, the trace read from a queue and from a stream bound to amq.rabbitmq.trace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from e2ekit import BASE_CONFIG, ServerProcess, start_server, wait_until

TRACE = "amq.rabbitmq.trace"


@pytest.fixture(scope="module")
def server(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(BASE_CONFIG)
    srv = start_server(kind, path, "--trace", "/")
    try:
        yield srv
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


def connect(server: ServerProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port("amqp"), heartbeat=0))


def get_all(ch: Any, queue: str) -> list[tuple[str, dict[str, Any], bytes]]:
    out = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((method.routing_key, props.headers, body))


def test_pika_traffic_reaches_the_firehose_with_rabbitmqs_headers(server: ServerProcess) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare("fh-trace", exclusive=True)
    ch.queue_bind("fh-trace", TRACE, "#")
    ch.queue_declare("fh-work", exclusive=True)
    ch.confirm_delivery()
    ch.basic_publish("", "fh-work", b"payload", pika.BasicProperties(delivery_mode=2, headers={"app": "x"}))
    received: list[bytes] = []
    ch.basic_consume("fh-work", lambda c, m, p, b: (received.append(b), c.basic_ack(m.delivery_tag)))
    wait_until(lambda: conn.process_data_events(0.05) or received, what="the delivery")
    traces: list[tuple[str, dict[str, Any], bytes]] = []
    wait_until(lambda: traces.extend(get_all(ch, "fh-trace")) or len(traces) >= 2, what="two trace messages")
    assert [key for key, _, _ in traces] == ["publish.amq.default", "deliver.fh-work"]
    pub, dlv = traces[0][1], traces[1][1]
    assert traces[0][2] == traces[1][2] == b"payload"
    assert pub["routed_queues"] == ["fh-work"]
    assert pub["exchange_name"] == "" and pub["routing_keys"] == ["fh-work"]
    assert pub["delivery_mode"] == 2 and pub["user"] == "guest" and pub["vhost"] == "/"
    assert pub["properties"] == {"delivery_mode": 2, "headers": {"app": "x"}}
    assert pub["channel"] == ch.channel_number and pub["timestamp_in_ms"] > 0
    assert dlv["redelivered"] == 0 and dlv["exchange_name"] == ""
    conn.close()


def test_a_stream_bound_to_the_firehose_keeps_the_traffic_history(server: ServerProcess) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare("fh-history", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind("fh-history", TRACE, "publish.#")
    ch.exchange_declare("fh-x", "fanout", auto_delete=True)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("fh-x", "k", str(i).encode())
    ch.basic_qos(prefetch_count=100)
    seen: list[tuple[str, bytes]] = []
    ch.basic_consume("fh-history", lambda c, m, p, b: (seen.append((m.routing_key, b)), c.basic_ack(m.delivery_tag)),
                     arguments={"x-stream-offset": "first"})
    wait_until(lambda: conn.process_data_events(0.05) or len(seen) >= 5, what="five traced publishes")
    assert seen[:5] == [("publish.fh-x", str(i).encode()) for i in range(5)]
    ch.queue_delete("fh-history")
    conn.close()


def test_trace_of_an_unknown_vhost_is_a_usage_error_in_one_line() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "servers", "serve", "--trace", "nope", "--check-config"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["sansmq serve: error: --trace: vhost 'nope' is not one of vhosts ['/']"]


def test_stomp_traffic_is_traced_with_its_user_and_connection(server: ServerProcess) -> None:
    import stomp
    from e2ekit import Collector, close_quietly

    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare("fh-stomp-trace", exclusive=True)
    ch.queue_bind("fh-stomp-trace", TRACE, "publish.amq.default")
    ch.queue_bind("fh-stomp-trace", TRACE, "deliver.fh-stomp")
    client = stomp.Connection12([("127.0.0.1", server.port("stomp"))], heartbeats=(0, 0), vhost="/")
    got = Collector()
    client.set_listener("c", got)
    client.connect("guest", "guest", wait=True)
    try:
        client.subscribe("/queue/fh-stomp", id="s1", ack="auto")
        client.send("/queue/fh-stomp", "over stomp")
        got.wait_messages(1)
        local_port = client.transport.socket.getsockname()[1]
    finally:
        close_quietly(client)
    traces: list[tuple[str, dict[str, Any], bytes]] = []
    wait_until(lambda: traces.extend(t for t in get_all(ch, "fh-stomp-trace") if t[2] == b"over stomp")
               or len(traces) >= 2, what="two trace messages")
    assert [key for key, _, _ in traces] == ["publish.amq.default", "deliver.fh-stomp"]
    for _, h, body in traces:
        assert body == b"over stomp" and h["user"] == "guest" and h["channel"] == 1
        assert h["connection"] == f"127.0.0.1:{local_port}"
    conn.close()
