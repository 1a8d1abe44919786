"""A threaded worker with sansmq_client.sync: a callback consumes while other threads publish.

    python docs/examples/client/sync_worker.py --url amqp://guest:guest@127.0.0.1:5672/ --count 3
"""

from __future__ import annotations

import argparse
import threading

import sansmq_client.sync
from sansmq_client import Delivery


def main(url: str, queue: str, count: int) -> None:
    with sansmq_client.sync.connect(url) as conn:  # close() on leaving the block
        conn.declare_queue(queue, durable=True)
        done = threading.Event()
        received: list[str] = []

        def handle(message: Delivery) -> None:  # runs on the subscription's own thread
            received.append(message.body.decode())
            conn.ack(message)
            if len(received) == count:
                done.set()

        subscription = conn.subscribe(queue, handle, prefetch=10)
        # Every method may be called from any thread: here each message is published by a thread of its own.
        publishers = [threading.Thread(target=conn.publish, args=(queue, f"job {i}".encode())) for i in range(count)]
        for thread in publishers:
            thread.start()
        for thread in publishers:
            thread.join()
        done.wait(30)
        subscription.cancel()
        print(f"handled {sorted(received)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--queue", default="client-guide-jobs")
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args()
    main(args.url, args.queue, args.count)
