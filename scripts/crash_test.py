#!/usr/bin/env python3
"""Crash test for the durable store: SIGKILL a real ``sansmq serve`` under load, restart, check.

Each cycle: start ``python -m servers serve --data DIR`` (server kinds in rotation), drain and ack
the queue left by the previous cycle (that is the check), then run STOMP publishers (persistent,
with receipts) and a consumer (client-individual acks, with receipts) and SIGKILL the server at a
random moment. The checks, over all cycles:

* every message whose SEND was receipted is delivered after the restart unless an ACK for it was sent
  (an ACK sent but not receipted may or may not have taken effect before the kill);
* no message whose ACK was receipted ever comes back;
* no message appears twice in one drain (a redelivery is only allowed for unconfirmed acks);
* the server always starts again on the crashed directory (torn tails dropped, counted);
* streams: every message is also appended to a stream (``/queue/crash-stream``, declared with
  ``x-queue-type:stream``); read after each restart, its offsets run 0, 1, 2, ... without a gap, no
  message appears twice, every receipted append is there, and what an earlier cycle read is still
  there unchanged (streams keep everything, so this holds over all cycles). Each cycle reads from a
  little before where the last read ended (the whole stream every ``FULL_READ_EVERY`` cycles and at
  the end): reading all of it every time made a cycle's cost grow with the cycles run.

``--power-cut drop|torn`` makes each kill a power cut: the server runs its store on
``engine.powercut.PowerCutFS`` (real files, plus an undo log of what was written since each file's
last fsync), and after the kill ``power_cut`` undoes every write its file's last fsync did not cover
(``torn``: the write-back stopped inside one of them, a random byte into it) before the restart.
The checks are the same: what was receipted was synced, so it must survive.

Usage: ``python scripts/crash_test.py --cycles 1000 [--data DIR] [--seed N] [--server asyncio]
[--power-cut drop|torn]`` (``--store postgresql://...`` crash-tests the PostgreSQL store in that
database instead) prints the counts and exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

LISTEN_RE = re.compile(rb"sansmq: stomp listening on \[?([^\s\]]+)\]?:(\d+)")
TORN_RE = re.compile(rb"recovery: (\d+) message records missing or torn")
QUEUE = "/queue/crash"
STREAM = "crash-stream"
STREAM_DECLARE = {"destination": f"/queue/{STREAM}", "x-queue-type": "stream", "durable": "true",
                  "auto-delete": "false"}
KINDS = ("asyncio", "threads", "trio")
#: a cycle re-reads this many of the offsets read before (they must be unchanged)
STREAM_OVERLAP = 1000
FULL_READ_EVERY = 100


@dataclass
class Counts:
    cycles: int = 0
    sent: int = 0
    receipted: int = 0
    acked_confirmed: int = 0
    recovered: int = 0
    redelivered_unconfirmed: int = 0
    unreceipted_survivors: int = 0
    torn_dropped: int = 0
    stream_receipted: int = 0
    stream_read: int = 0
    cut_files: int = 0  # --power-cut: files that had unsynced writes at the kill
    cut_undone: int = 0  # unsynced writes undone
    cut_torn: int = 0  # unsynced writes kept in part
    violations: list[str] = field(default_factory=list)


class Client:
    """A minimal blocking STOMP 1.2 client on a raw socket (bodies never contain NUL)."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr, timeout=5)
        self.sock.settimeout(None)
        self.frames: list[tuple[bytes, dict[str, str], bytes]] = []
        self.cond = threading.Condition()
        self.closed = False
        self.send_frame(b"CONNECT", {"accept-version": "1.2", "host": "/", "heart-beat": "0,0", "login": "guest",
                                     "passcode": "guest"})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.wait(lambda: any(f[0] == b"CONNECTED" for f in self.frames), 5):
            raise ConnectionError("no CONNECTED")

    def send_frame(self, command: bytes, headers: dict[str, str], body: bytes = b"") -> None:
        head = b"".join(f"{k}:{v}\n".encode() for k, v in headers.items())
        self.sock.sendall(command + b"\n" + head + b"\n" + body + b"\x00")

    def _read(self) -> None:
        buf = bytearray()
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                buf += data
                frames = []
                while (end := buf.find(b"\x00")) >= 0:
                    raw = bytes(buf[:end]).lstrip(b"\r\n")
                    del buf[: end + 1]
                    head, _, body = raw.partition(b"\n\n")
                    lines = head.split(b"\n")
                    hdrs = dict(line.decode().split(":", 1) for line in lines[1:] if b":" in line)
                    frames.append((lines[0], hdrs, body))
                if frames:
                    with self.cond:
                        self.frames.extend(frames)
                        self.cond.notify_all()
        except OSError:
            pass
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait(self, pred, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def start_server(data: str, kind: str, store: str | None = None, cut_log: str | None = None
                 ) -> tuple[subprocess.Popen[bytes], tuple[str, int], list[bytes]]:
    """``cut_log``: run the store on PowerCutFS, its undo log there (see ``power_cut_after``)."""
    from servers.cli import PROTOCOLS  # only the STOMP listener (on a free port), whatever else exists

    # (the HTTP and Prometheus listeners too: their fixed default ports may be taken by another broker)
    others = [f"--no-{proto}" for proto, _, _ in PROTOCOLS if proto != "stomp"] + ["--no-http", "--no-prometheus"]
    cmd = [sys.executable, "-m", "servers", "serve", "--server", kind, "--stomp", "127.0.0.1:0",
           *others, *(["--store", store] if store else ["--data", data]), "--log-level", "info"]
    env = None
    if cut_log:
        from engine.powercut import POWER_CUT_LOG

        env = {**os.environ, POWER_CUT_LOG: cut_log}
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env)
    lines: list[bytes] = []
    found = threading.Event()
    addr: list[tuple[str, int]] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if not found.is_set() and (m := LISTEN_RE.search(line)):
                addr.append((m.group(1).decode(), int(m.group(2))))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    if not found.wait(30) or not addr:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"server did not start: {b''.join(lines).decode(errors='replace')[-2000:]}")
    return proc, addr[0], lines


def drain_and_ack(addr: tuple[str, int], idle: float = 0.5) -> list[bytes]:
    """Every message in the queue, each acked with a receipt (all receipts awaited)."""
    c = Client(addr)
    c.send_frame(b"SUBSCRIBE", {"destination": QUEUE, "id": "v", "ack": "client-individual"})
    seen = 0
    bodies: list[bytes] = []
    while True:
        if not c.wait(lambda: len(c.frames) > seen or c.closed, idle):  # noqa: B023  # called right here
            break
        with c.cond:
            new, seen = c.frames[seen:], len(c.frames)
        for cmd, hdrs, body in new:
            if cmd == b"MESSAGE":
                bodies.append(body)
                c.send_frame(b"ACK", {"id": hdrs["ack"], "receipt": "va-" + body.decode()})
            elif cmd == b"ERROR":
                raise RuntimeError(f"ERROR while draining: {hdrs} {body!r}")
    want = {"va-" + b.decode() for b in bodies}
    ok = c.wait(lambda: want <= {h.get("receipt-id") for cmd, h, _ in c.frames if cmd == b"RECEIPT"}, 10)
    c.close()
    if not ok:
        raise RuntimeError("drain acks were not all receipted")
    return bodies


def read_stream(addr: tuple[str, int], start: int = 0, at_least: int = 0, idle: float = 0.5,
                patience: float = 30.0) -> list[tuple[int, bytes]] | None:
    """The stream from offset ``start``: (offset, body) in delivery order; None while it does not
    exist. Reading ends after ``idle`` seconds without a frame once ``at_least`` messages came (a
    loaded machine may pause longer than that mid-stream), else after ``patience`` seconds without
    one."""
    c = Client(addr)
    c.send_frame(b"SUBSCRIBE", {"destination": f"/amq/queue/{STREAM}", "id": "s", "ack": "client",
                                "prefetch-count": "1000", "x-stream-offset": f"offset={start}"})
    seen = 0
    out: list[tuple[int, bytes]] = []
    while c.wait(lambda: len(c.frames) > seen or c.closed,  # noqa: B023  # called right here
                 idle if len(out) >= at_least else patience):
        with c.cond:
            new, seen = c.frames[seen:], len(c.frames)
        for cmd, hdrs, body in new:
            if cmd == b"ERROR":
                c.close()
                if b"no queue" in body or "no queue" in hdrs.get("message", ""):
                    return None
                raise RuntimeError(f"ERROR while reading the stream: {hdrs} {body!r}")
            if cmd == b"MESSAGE":
                out.append((int(hdrs["x-stream-offset"]), body))
                c.send_frame(b"ACK", {"id": hdrs["ack"]})  # client mode: acks everything so far
        if c.closed:
            break
    c.close()
    return out


class StreamCheck:
    """What the stream held when it was last read, checked against each new read."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []  # body at each offset read so far
        self.known: set[bytes] = set()

    def check(self, cycle: int, addr: tuple[str, int], receipted: set[bytes], counts: Counts,
              full: bool) -> None:
        start = 0 if full else max(0, len(self.bodies) - STREAM_OVERLAP)
        unseen = len(receipted - self.known)
        got = read_stream(addr, start, len(self.bodies) - start + unseen)
        if got is None:
            if receipted:
                counts.violations.append(f"cycle {cycle}: the stream is gone with {len(receipted)} receipted appends")
            return
        offsets = [o for o, _ in got]
        if offsets != list(range(start, start + len(got))):
            counts.violations.append(f"cycle {cycle}: stream offsets from {start} are not contiguous: "
                                     f"{offsets[:20]}...")
            return
        if len(got) < len(self.bodies) - start:
            counts.violations.append(f"cycle {cycle}: the stream ends at {start + len(got)}, "
                                     f"{len(self.bodies)} were read before")
        for off, body in got:
            if off < len(self.bodies):
                if body != self.bodies[off]:
                    counts.violations.append(f"cycle {cycle}: offset {off} changed: {self.bodies[off]!r} -> {body!r}")
            elif body in self.known:
                counts.violations.append(f"cycle {cycle}: {body!r} appears twice in the stream")
            else:
                self.bodies.append(body)
                self.known.add(body)
        for b in receipted - self.known:
            counts.violations.append(f"cycle {cycle}: receipted stream append {b!r} lost")
        counts.stream_read = len(self.bodies)


def _note_receipt(rid: str, receipted: set[bytes], stream_receipted: set[bytes]) -> None:
    if rid.startswith("s-"):
        stream_receipted.add(rid[2:].encode())
    else:
        receipted.add(rid.encode())


def load(addr: tuple[str, int], cycle: int, duration: float, rng: random.Random,
         receipted: set[bytes], acked: set[bytes], delivered: set[bytes], ack_sent: set[bytes],
         counts: Counts, stream_receipted: set[bytes]) -> None:
    """Publish and consume until ``duration`` passed (the server is killed meanwhile)."""
    try:
        pub = Client(addr)
    except OSError:
        return  # killed before the load started
    try:
        con = Client(addr)
    except OSError:
        pub.close()
        return
    deadline = time.monotonic() + duration
    n = 0
    seen_p = seen_c = 0
    try:
        con.send_frame(b"SUBSCRIBE", {"destination": QUEUE, "id": "c", "ack": "client-individual"})
        while time.monotonic() < deadline and not pub.closed:
            for _ in range(rng.randint(1, 20)):
                n += 1
                body = f"c{cycle}-{n}".encode()
                pub.send_frame(b"SEND", {"destination": QUEUE, "persistent": "true", "receipt": body.decode()}, body)
                pub.send_frame(b"SEND", {**STREAM_DECLARE, "receipt": "s-" + body.decode()}, body)
                counts.sent += 1
            with pub.cond:
                new_p, seen_p = pub.frames[seen_p:], len(pub.frames)
            for cmd, hdrs, _ in new_p:
                if cmd == b"RECEIPT":
                    _note_receipt(hdrs["receipt-id"], receipted, stream_receipted)
            with con.cond:
                new_c, seen_c = con.frames[seen_c:], len(con.frames)
            for cmd, hdrs, body in new_c:
                if cmd == b"MESSAGE":
                    delivered.add(body)
                    if rng.random() < 0.8:  # some stay unacked: redelivered after the crash
                        ack_sent.add(body)
                        con.send_frame(b"ACK", {"id": hdrs["ack"], "receipt": "a-" + body.decode()})
                elif cmd == b"RECEIPT" and hdrs["receipt-id"].startswith("a-"):
                    acked.add(hdrs["receipt-id"][2:].encode())
            time.sleep(0.002)
    except OSError:
        pass  # the server died under us
    finally:
        for c in (pub, con):
            c.wait(lambda: c.closed, 0)  # noqa: B023  # called right here
        # receipts that arrived before the kill still count
        for cmd, hdrs, _ in list(pub.frames):
            if cmd == b"RECEIPT":
                _note_receipt(hdrs["receipt-id"], receipted, stream_receipted)
        for cmd, hdrs, _ in list(con.frames):
            if cmd == b"RECEIPT" and hdrs["receipt-id"].startswith("a-"):
                acked.add(hdrs["receipt-id"][2:].encode())
        pub.close()
        con.close()


def power_cut_after(cut_log: str, data: str, mode: str, rng: random.Random, counts: Counts) -> None:
    """The killed server's machine loses power: what no fsync covered is undone (or torn)."""
    from engine.powercut import power_cut

    report = power_cut(cut_log, data, rng if mode == "torn" else None)
    counts.cut_files += report.files
    counts.cut_undone += report.undone
    counts.cut_torn += report.torn


def run_cycles(cycles: int, data: str, seed: int = 0, kinds: tuple[str, ...] = KINDS,
               log=print, store: str | None = None, power_cut: str | None = None) -> Counts:
    """``store``: a ``postgresql://`` URL to crash-test the PostgreSQL store instead of ``data``;
    ``power_cut``: ``drop`` or ``torn`` to follow each kill with a power cut (segment store only)."""
    if power_cut is not None and (store or power_cut not in ("drop", "torn")):
        raise ValueError("--power-cut drop|torn needs the segment store (a data directory)")
    cut_log = data.rstrip("/") + ".cut-log" if power_cut else None  # beside the directory, not in it
    rng = random.Random(seed)
    counts = Counts()
    receipted: set[bytes] = set()  # SEND receipted, not yet seen in a drain
    acked: set[bytes] = set()  # ACK receipted: must never come back
    gone: set[bytes] = set()  # drained and acked with receipt in an earlier check
    ack_sent: set[bytes] = set()  # an ACK went out (confirmed or not)
    delivered_prev: set[bytes] = set()
    stream_receipted: set[bytes] = set()  # appended to the stream with a receipt, over all cycles
    stream = StreamCheck()
    for cycle in range(cycles + 1):
        kind = kinds[cycle % len(kinds)]
        proc, addr, lines = start_server(data, kind, store, cut_log)
        try:
            bodies = drain_and_ack(addr)
            stream.check(cycle, addr, stream_receipted, counts,
                         full=cycle == cycles or cycle % FULL_READ_EVERY == 0)
            counts.stream_receipted = len(stream_receipted)
            counts.torn_dropped += sum(int(m.group(1)) for line in lines if (m := TORN_RE.search(line)))
            got = set(bodies)
            if len(got) != len(bodies):
                counts.violations.append(f"cycle {cycle}: duplicates in one drain")
            for b in got & acked:
                counts.violations.append(f"cycle {cycle}: acked message {b!r} came back")
            for b in got & gone:
                counts.violations.append(f"cycle {cycle}: drained message {b!r} came back")
            for b in receipted - ack_sent - got:
                counts.violations.append(f"cycle {cycle}: receipted message {b!r} lost")
            counts.recovered += len(got)
            counts.unreceipted_survivors += len(got - receipted)
            counts.redelivered_unconfirmed += len(got & delivered_prev)
            counts.receipted += len(receipted)
            counts.acked_confirmed += len(acked)
            gone |= got
            receipted.clear()
            acked.clear()
            ack_sent.clear()
            if cycle == cycles:
                break
            delivered: set[bytes] = set()
            duration = rng.uniform(0.05, 0.5)
            killer = threading.Timer(duration, proc.send_signal, (signal.SIGKILL,))
            killer.start()
            load(addr, cycle, duration + 1.0, rng, receipted, acked, delivered, ack_sent, counts, stream_receipted)
            killer.join()
            delivered_prev = delivered
            counts.cycles += 1
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if cut_log and os.path.exists(cut_log):
                power_cut_after(cut_log, data, power_cut, rng, counts)  # type: ignore[arg-type]
        if counts.violations:
            break
        if log is not None and (cycle + 1) % 50 == 0:
            log(f"{cycle + 1} cycles: {counts}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--data", help="data directory (default: a fresh temporary one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server", choices=KINDS, action="append", help="server kinds (default: all, in turn)")
    parser.add_argument("--store", metavar="postgresql://...", help="crash-test the PostgreSQL store in this database")
    parser.add_argument("--power-cut", choices=("drop", "torn"),
                        help="after each kill, undo what no fsync covered (torn: a write torn inside a page)")
    args = parser.parse_args(argv)
    data = args.data or tempfile.mkdtemp(prefix="sansmq-crash-")
    try:
        counts = run_cycles(args.cycles, data, args.seed, tuple(args.server or KINDS), store=args.store,
                            power_cut=args.power_cut)
    finally:
        if not args.data:
            shutil.rmtree(data, ignore_errors=True)
    for name in ("cycles", "sent", "receipted", "acked_confirmed", "recovered", "redelivered_unconfirmed",
                 "unreceipted_survivors", "torn_dropped", "stream_receipted", "stream_read",
                 *(("cut_files", "cut_undone", "cut_torn") if args.power_cut else ())):
        print(f"{name:24} {getattr(counts, name)}")
    print(f"{'violations':24} {len(counts.violations)}")
    for v in counts.violations[:20]:
        print("  " + v)
    return 1 if counts.violations else 0


if __name__ == "__main__":
    sys.exit(main())
