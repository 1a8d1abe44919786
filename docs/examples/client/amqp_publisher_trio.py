"""An AMQP publisher on trio with sansmq_client: declare a queue, publish with confirms.

    python docs/examples/client/amqp_publisher_trio.py --url amqp://guest:guest@127.0.0.1:5672/ --count 3
"""

from __future__ import annotations

import argparse

import trio

import sansmq_client.trio
from sansmq_client import BasicProperties


async def main(url: str, queue: str, count: int) -> None:
    conn = await sansmq_client.trio.connect(url)
    await conn.declare_queue(queue, durable=True)  # what STOMP's /queue/<name> declares, so both agree
    persistent = BasicProperties(content_type="text/plain", delivery_mode=2)
    for i in range(count):
        # Returns once the broker confirmed the message (on disk, for a persistent one); raises if the
        # broker refused it or the connection was lost before the confirm.
        await conn.publish(queue, f"message {i}".encode(), properties=persistent)
    print(f"published {count} messages, all confirmed")
    await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--queue", default="client-guide")
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args()
    trio.run(main, args.url, args.queue, args.count)
