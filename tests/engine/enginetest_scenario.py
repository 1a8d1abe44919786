"""A scripted scenario touching most of the engine; run as a script it prints the digest of every
action the broker emitted (used by the determinism test across processes/hash seeds)."""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from enginetest_helpers import ack, connected, messages, nack, send, subscribe  # noqa: E402

from engine import Broker, Config, Limits  # noqa: E402
from engine.testing import FakeStore, SimNetwork  # noqa: E402
from stompproto import Begin, Commit  # noqa: E402


def run_scenario(seed: int = 7) -> list[tuple]:
    store = FakeStore(needs_sync=True)
    cfg = Config(limits=Limits(max_outbound_buffer=4000))
    net = SimNetwork(Broker(cfg, store, random.Random(seed)), seed=seed, max_chunk=13)
    clients = [connected(net, headers={"heart-beat": "2000,2000"}) for _ in range(4)]
    a, b, c, p = clients
    subscribe(a, "/queue/work", "w", ack="client-individual", prefetch_count="3")
    subscribe(b, "/queue/work", "w", ack="client")
    subscribe(c, "/topic/ev.#", "t")
    subscribe(c, "/topic/ev*", "prefix")
    subscribe(a, "/topic/news", "dur", durable="true")
    net.run_until_idle()
    c.stop_reading()
    for i in range(40):
        send(p, "/queue/work", b"job %d" % i, persistent="true", priority=str(i % 4),
             receipt=f"r{i}", **({"ack-timeout": "1.5"} if i % 7 == 0 else {}))
        send(p, f"/topic/ev.{i % 3}", b"ev %d" % i, ttl="3000", reply_to="/temp-queue/r")
    p.send(Begin({"transaction": "tx"}))
    send(p, "/topic/news", b"in tx", transaction="tx")
    p.send(Commit({"transaction": "tx", "receipt": "c"}))
    net.run_until_idle()
    rng = random.Random(seed)
    for _ in range(30):
        for cl in (a, b):
            for m in messages(cl):
                if "ack" not in m.headers:
                    continue
                r = rng.random()
                if r < 0.6:
                    ack(cl, m)
                elif r < 0.8:
                    nack(cl, m)
        net.advance(0.5)
    c.start_reading()
    net.advance(2)
    b.drop()
    net.advance(5)
    return net.log


def digest(log: list[tuple]) -> str:
    h = hashlib.sha256()
    for item in log:
        h.update(repr(item).encode())
    return h.hexdigest()


if __name__ == "__main__":
    print(digest(run_scenario(int(sys.argv[1]) if len(sys.argv) > 1 else 7)))
