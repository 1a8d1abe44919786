"""A STOMP consumer on asyncio with sansmq_client: subscribe, print, ack; reconnects by itself.

    python docs/examples/client/stomp_consumer_asyncio.py --url stomp://guest:guest@127.0.0.1:61613/ --count 3
"""

from __future__ import annotations

import argparse
import asyncio

import sansmq_client.asyncio


async def main(url: str, queue: str, count: int) -> None:
    conn = await sansmq_client.asyncio.connect(url)
    print("connected")
    subscription = await conn.subscribe(f"/queue/{queue}", prefetch=10)
    received = 0
    async for message in subscription:  # heart-beats flow meanwhile, however long the body below takes
        print(f"received {message.body.decode()!r}")
        await conn.ack(message)
        received += 1
        if received == count:
            break
    await conn.close()
    print("closed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="stomp://guest:guest@127.0.0.1:61613/")
    parser.add_argument("--queue", default="client-guide")
    parser.add_argument("--count", type=int, default=3, help="messages to receive before closing")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.queue, args.count))
