"""Many connections and a slow consumer, against each server kind."""

from __future__ import annotations

import os
import resource
import socket
import sys
import threading
import time

import pytest
from e2ekit import (
    BASE_CONFIG,
    RawStomp,
    ServerProcess,
    ack_args,
    close_quietly,
    connect,
    frame,
    fresh_data_dir,
    wait_until,
)

import servers
from servers.management import OPS_EPHEMERAL

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server_config() -> str:
    # 1,000 sockets in this process plus 1,000 in the server: raise the soft limit to the hard
    # one before the server starts (it inherits it).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 2200, "hard NOFILE limit too low"
    return BASE_CONFIG + "max_outbound_buffer = 1048576\n"


#: messages of 1 MiB a consumer that stopped reading may hold: 1 MiB of broker buffer plus what
#: the kernel socket buffers absorb on loopback (a few MiB); without back-pressure it is ~half.
SLOW_SHARE_MAX = 10


def test_thousand_concurrent_connections(server) -> None:
    n = 1000
    topic = f"/topic/load-{os.getpid()}"
    socks = []
    try:
        connect_frame = frame(
            "CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"}
        )
        for _ in range(n):
            raw = RawStomp(server.addr, timeout=20)
            raw.send(connect_frame)  # pipelined: do not wait for CONNECTED one by one
            socks.append(raw)
        for i, raw in enumerate(socks):
            assert raw.read_frame()[0] == "CONNECTED"
            raw.send_frame("SUBSCRIBE", {"destination": topic, "id": "s", "receipt": f"r{i}"})
        for i, raw in enumerate(socks):
            command, headers, _ = raw.read_frame()
            assert (command, headers.get("receipt-id")) == ("RECEIPT", f"r{i}")
        pub, pc = connect(server.addr)
        for k in range(3):
            pub.send(topic, f"hello-{k}")
        for raw in socks:
            for k in range(3):
                command, _, body = raw.read_frame()
                assert (command, body) == ("MESSAGE", b"hello-%d" % k)
        close_quietly(pub)
    finally:
        for raw in socks:
            raw.close()
    # the server is still fine afterwards
    conn, c = connect(server.addr)
    conn.send("/control/count-msgs/queue/none", "", headers={"receipt": "ok"})
    c.wait_receipt("ok")
    close_quietly(conn)


def _outbound(broker) -> dict[int, int]:
    """Bytes the engine has queued per connection (written, not yet reported sent).

    Read from the test thread while the server thread runs: only ints are read, and a dict
    resized mid-copy is simply read again.
    """
    while True:
        try:
            return {cid: s.outbound for cid, s in list(broker.sessions.items())}
        except RuntimeError:
            continue


def test_slow_consumer_is_bounded_and_others_keep_receiving(kind: str) -> None:
    """In-process server, so the engine's buffered bytes can be watched while 64 MiB flow."""
    from engine.config import Config

    config = Config()
    config.limits.max_outbound_buffer = 1024 * 1024
    q = f"/queue/slow-{os.getpid()}"
    chunk = 1024 * 1024
    total = 64  # 64 MiB published
    body = os.urandom(chunk)
    with servers.running(kind, [("stomp", "127.0.0.1", 0)], config=config) as srv:
        addr = srv.address()
        # The slow consumer subscribes with client acks and then stops reading its socket.
        slow = RawStomp(addr, timeout=20, rcvbuf=32 * 1024)
        slow.connect("1.2")
        slow.send_frame("SUBSCRIBE", {"destination": q, "id": "slow", "ack": "client", "receipt": "s"})
        assert slow.read_frame()[0] == "RECEIPT"
        slow_id = max(srv.broker.sessions)  # the newest connection

        fast, fc = connect(addr, "1.2", auto_decode=False)
        fast.subscribe(q, id="fast", ack="client-individual", headers={"receipt": "f"})
        fc.wait_receipt("f")
        pub, pc = connect(addr, "1.2", auto_decode=False)

        peak = {"slow": 0, "all": 0}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                out = _outbound(srv.broker)
                peak["slow"] = max(peak["slow"], out.get(slow_id, 0))
                peak["all"] = max(peak["all"], sum(out.values()))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        acked = 0
        try:
            for i in range(total):
                pub.send(q, body, headers={"seq": str(i)})
                # Pace the producer by the fast consumer (STOMP has no publisher flow control
                # and this test is about the slow one): a bounded number in flight.
                fc.wait(lambda i=i: len(fc.messages) >= i - SLOW_SHARE_MAX - 8, 30, "fast consumer")
                while acked < len(fc.messages):
                    fast.ack(**ack_args("1.2", fc.messages[acked]))
                    acked += 1
            pub.send(q, b"end", headers={"receipt": "sent"})
            pc.wait_receipt("sent", 30)
            fc.wait(lambda: any(f.body == b"end" for f in fc.messages), 30, "the end marker")
        finally:
            stop.set()
            sampler.join()
        fast_seqs = [int(f.headers["seq"]) for f in fc.messages if "seq" in f.headers]
        slow_share = total - len(fast_seqs)
        # Deliveries to the slow consumer stopped at max_outbound_buffer (+ one message, + what
        # the kernel socket buffers absorbed); the fast one got everything else meanwhile.
        assert 0 < slow_share <= SLOW_SHARE_MAX, slow_share
        assert peak["slow"] <= config.limits.max_outbound_buffer + chunk + 4096, peak
        assert peak["all"] <= 4 * (config.limits.max_outbound_buffer + chunk + 4096), peak
        # Nothing lost: the slow consumer holds exactly the rest, and can still ack them.
        slow_seqs = []
        for _ in range(slow_share):
            command, headers, got = slow.read_frame()
            assert command == "MESSAGE" and got == body
            slow_seqs.append(int(headers["seq"]))
        assert sorted(fast_seqs + slow_seqs) == list(range(total))
        slow.send_frame("ACK", {"id": headers["ack"], "receipt": "acked"})
        assert slow.read_frame()[:2] == ("RECEIPT", {"receipt-id": "acked"})
        slow.close()
        close_quietly(fast)
        close_quietly(pub)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_out_of_file_descriptors_is_survived_without_spinning(kind: str) -> None:
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48)); "
            "from servers.cli import main; sys.exit(main())")
    srv = ServerProcess([sys.executable, "-c", code, "serve", *OPS_EPHEMERAL, "--server", kind,
                         "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0",
                         "--amqp", "127.0.0.1:0", "--data", fresh_data_dir()], kind)
    socks = []
    try:
        for _ in range(80):  # more than the server can accept: the rest wait in the backlog
            socks.append(socket.create_connection(srv.addr, timeout=5))
        wait_until(lambda: any("accept" in line for line in srv.lines), 10, "accept to fail")
        before, t0 = _cpu_seconds(srv.proc.pid), time.monotonic()
        time.sleep(1.0)  # the listener stays readable all along: a busy loop would burn ~1 s
        used = _cpu_seconds(srv.proc.pid) - before
        assert used < 0.5 * (time.monotonic() - t0), f"{used:.2f}s of CPU while out of fds"
        for s in socks:
            s.close()
        socks.clear()
        conn, c = connect(srv.addr, "1.2")  # the broker recovers once descriptors are free
        conn.send("/queue/fd", "ok", headers={"receipt": "r"})
        c.wait_receipt("r")
        close_quietly(conn)
    finally:
        for s in socks:
            s.close()
        assert srv.terminate() == 0, srv.lines[-10:]
