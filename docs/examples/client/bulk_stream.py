"""Bulk calls of sansmq_client for data pipelines: publish a batch with confirms, read a stream range
back as columns (no object per message).

    python docs/examples/client/bulk_stream.py --url amqp://guest:guest@127.0.0.1:5672/ --count 3
"""

from __future__ import annotations

import argparse

from amqpproto import spec
from sansmq_client import sync
from sansmq_client.bulk import publish_batch, read_stream


def main(url: str, queue: str, count: int) -> None:
    with sync.connect(url) as conn:
        conn.declare_queue(queue, durable=True, arguments={"x-queue-type": "stream"})
        props = spec.encode_properties(spec.BasicProperties(delivery_mode=2, content_type="text/plain"))
        # returns once the broker confirmed every message (mandatory: an unroutable one raises Unroutable)
        publish_batch(conn, "", [(queue, props, b"row %d" % i) for i in range(count)])
        for columns in read_stream(conn, queue, 0, count, batch_rows=1000):  # amqpproto.bulk.DeliveryColumns
            for offset, body in zip(columns.offset, columns.body, strict=True):
                print(f"offset {offset}: {body.decode()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    ap.add_argument("--queue", default="events")
    ap.add_argument("--count", type=int, default=3)
    a = ap.parse_args()
    main(a.url, a.queue, a.count)
