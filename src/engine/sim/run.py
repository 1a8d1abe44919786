"""One seed, start to end: generate the steps, run them on a ``SimWorld`` checking the ``Oracle``
after each, then cut the power, boot, drain every queue and check nothing confirmed is missing.
A failing step list shrinks (delta debugging) to a shorter one that fails the same way."""

from __future__ import annotations

import hashlib
import json
import random
import traceback
from dataclasses import dataclass, field
from typing import Any

from amqpproto import spec

from ..config import Config, Limits
from ..store import StoreError
from .features import DELAYS_MS, Churner, feature_actors
from .memory import check_memory
from .oracle import Oracle, Violation
from .workload import DLQ, HEARTBEAT, QUEUES, STREAM, Actor, AmqpConsumer, Refused, declare_all, make_actors
from .world import SimWorld, StoreFactory, quiet_store_log, segment_store

__all__ = ["FAULTS", "Result", "generate", "run_seed", "run_steps", "shrink"]

Step = tuple[Any, ...]

#: a small queue window: ready messages beyond 8 are paged out to the store (transient records too)
QUEUE_WINDOW = 8
#: the watermark while the memory alarm fault is on: any memory use (even none) is over it
ALARM_WATERMARK = -1
_WATERMARK = Limits().memory_high_watermark
#: fault classes: what ``--faults`` selects
FAULTS = ("clock", "drop", "crash", "torn", "fsync", "diskfull", "media", "halfopen", "heartbeat", "slow",
          "memory")
#: publishers -> the queues they publish to
_PUBLISHERS = {"pc": ("q0", "q1", "ttl", DLQ, STREAM), "pn": ("q0", "q1", "ttl", DLQ, STREAM),
               "ps": ("q0", "q1", "ttl", STREAM), "pw": ("q0", "q1", "ttl", STREAM),
               "pp": ("prio",), "pdl": ("qd",), "pdd": (STREAM,)}
_CONSUMERS = ("c0", "c1", "ct", "cs", "cp", "cq", "cd", "cx")
#: consumers a slow-reader fault may hit (not the priority queue's: its check trusts delivery order)
_SLOW = ("c0", "c1", "ct", "cq", "cd", "cx")
_CHURN = ("declare", "declare", "publish", "publish", "unbind", "delete", "exchange")


def generate(seed: int, faults: frozenset[str] | set[str], n: int | None = None) -> list[Step]:
    """The seed's step list (workload and faults interleaved)."""
    rng = random.Random(f"{seed}/steps")
    n = n if n is not None else rng.randint(30, 90)
    menu: list[tuple[int, str]] = [(30, "pub"), (14, "ack"), (3, "nack"), (2, "reject"), (2, "cancel"),
                                   (8, "advance"), (10, "sync"), (1, "restart")]
    menu += [(3, "tx"), (3, "txack"), (2, "resend"), (4, "churn")]
    menu += [(w, k) for w, k, f in ((3, "jump", "clock"), (3, "drop", "drop"), (3, "crash", "crash"),
                                    (3, "crash", "torn"), (3, "cut", "crash"), (3, "syncfail", "fsync"),
                                    (2, "disk", "diskfull"), (2, "media", "media"), (2, "halfopen", "halfopen"),
                                    (2, "stall", "heartbeat"), (3, "slow", "slow"), (2, "alarm", "memory"))
             if f in faults]
    kinds, weights = zip(*[(k, w) for w, k in menu], strict=True)
    steps: list[Step] = []
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        if kind == "pub":
            pub = rng.choice(sorted(_PUBLISHERS))
            steps.append(("pub", pub, rng.choice(_PUBLISHERS[pub]), rng.randint(1, 6)))
        elif kind in ("tx", "txack"):
            steps.append((kind, rng.randint(1, 4), rng.randint(0, 1)))
        elif kind == "resend":
            steps.append(("resend", rng.randint(1, 4)))
        elif kind == "churn":
            steps.append(("churn", rng.choice(_CHURN), rng.randint(1, 3)))
        elif kind == "halfopen":
            steps.append(("halfopen", "c0"))
        elif kind == "stall":
            steps.append(("stall", rng.choice((0.5, 4))))
        elif kind == "slow":
            steps.append(("slow", rng.choice(_SLOW), rng.randint(0, 1)))
        elif kind == "alarm":
            steps.append(("alarm", rng.randint(0, 1)))
        elif kind in ("ack", "nack", "reject", "cancel"):
            steps.append((kind, rng.choice(_CONSUMERS), rng.randint(1, 4)))
        elif kind == "advance":
            steps.append(("advance", rng.choice((1, 10, 100, 500, 1000, 2000))))
        elif kind == "jump":
            steps.append(("advance", rng.choice((5_000, 60_000, 3_600_000))))
        elif kind == "sync":
            steps.append(("sync", 0))
        elif kind == "syncfail":
            steps.append(("sync", 1))
        elif kind == "drop":
            steps.append(("drop", rng.choice((*sorted(_PUBLISHERS), *_CONSUMERS))))
        elif kind == "crash":
            mode = "drop" if "torn" not in faults else rng.choice(("drop", "torn", "scramble"))
            steps.append(("crash", mode, ""))
        elif kind == "cut":
            mode = "drop" if "torn" not in faults else rng.choice(("drop", "torn", "scramble"))
            steps.append(("cut", rng.randint(0, 3), mode))
        elif kind == "media":
            steps.append(("crash", "drop", rng.choice(("bit-flip", "truncation"))))
        elif kind == "disk":
            steps.append(("disk", rng.randint(0, 1)))
        else:
            steps.append(("restart",))
    return steps


@dataclass
class Result:
    seed: int
    steps: list[Step]
    violation: str | None = None
    kind: str | None = None
    failed_at: int | None = None  # index of the step after which it failed (len(steps): the end)
    trace: list[str] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.violation is None

    @property
    def trace_hash(self) -> str:
        return hashlib.blake2b("\n".join(self.trace).encode(), digest_size=16).hexdigest()

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "violation": self.violation, "kind": self.kind,
                           "failed_at": self.failed_at, "steps": self.steps, "faults": self.faults,
                           "trace_hash": self.trace_hash, "trace": self.trace}, indent=1)


class _Run:
    def __init__(self, seed: int, store: StoreFactory) -> None:
        self.seed = seed
        # each run its own config: the memory alarm fault changes its watermark
        self.world = SimWorld(seed, store=store, config=Config(limits=Limits(queue_window=QUEUE_WINDOW)))
        self.oracle = Oracle()
        self.actors: dict[str, Actor] = {**make_actors(self.world, self.oracle),
                                         **feature_actors(self.world, self.oracle)}
        self.churner: Churner = self.actors["tc"]  # type: ignore[assignment]
        #: publisher -> its connection once it published while the memory alarm was on (so blocked)
        self.blocked: dict[str, Any] = {}
        self.next_mid = 1
        self.stopped = ""  # the store refused the disk: nothing more can run
        self._journal = self.world.journal_mark()
        declare_all(self.world)
        self.world.sync()

    def collect(self) -> None:
        for actor in self.actors.values():
            actor.collect()

    def step(self, step: Step) -> None:
        self.oracle.step += 1
        _STEPS[step[0]](self, *step[1:])
        for name, client in list(self.blocked.items()):
            if self.actors[name].client is not client:  # a new connection is not blocked (yet)
                del self.blocked[name]
                self.oracle.unhold(name)
        self.collect()
        self.world.take_reports()
        self._journal_moved()
        self._check_half_open()
        check_memory(self.world, self.oracle, self.churner.bytes)

    def _pub(self, name: str, queue: str, n: int) -> None:
        actor: Any = self.actors[name]
        for _ in range(n):
            was = self.blocked.get(name)
            blocked = self.oracle.alarm and was is not None and was is actor.client
            actor.publish(self.next_mid, queue)
            if blocked and actor.client is was:
                self.oracle.held[self.next_mid] = name  # not confirmed before the alarm clears
            self.next_mid += 1
        self.world.run()
        if self.oracle.alarm and actor.client is not None:
            self.blocked.setdefault(name, actor.client)

    def _tx(self, n: int, commit: int) -> None:
        for _ in range(n):
            self.actors["ptx"].publish(self.next_mid, "qtx")  # type: ignore[attr-defined]
            self.next_mid += 1
        self.actors["ptx"].finish(bool(commit))  # type: ignore[attr-defined]

    def _txack(self, n: int, commit: int) -> None:
        self.actors["ctx"].settle_tx(n, bool(commit))  # type: ignore[attr-defined]

    def _resend(self, k: int) -> None:
        self.actors["pdd"].resend(k)  # type: ignore[attr-defined]

    def _churn(self, op: str, n: int) -> None:
        self.churner.churn(op, n)

    def _half_open(self, name: str) -> None:
        actor = self.actors[name]
        actor.ensure()
        actor.freeze()

    def _check_half_open(self) -> None:
        """The broker gives up on a half-open peer after two missed heartbeats (RabbitMQ's rule):
        it must have closed it (and requeued its unacked) once that time has passed."""
        for actor in self.actors.values():
            since = actor.frozen_at
            if since is not None and self.world.now > since + 3 * HEARTBEAT and not actor.closed_by_broker():
                raise Violation("half-open", f"{actor.name}: half-open since {since}, still open at {self.world.now}")

    def _stall(self, factor: float) -> None:
        """c0 stops heart-beating for ``factor`` heartbeats, then goes on: under two heartbeats the
        broker must keep the connection, beyond three it must have closed it."""
        actor = self.actors["c0"]
        if not actor.ensure():
            return
        client = actor.client
        client.auto_heartbeat = False
        self.world.advance(factor * HEARTBEAT)
        client.resume_heartbeat()  # what came due meanwhile goes out now, as a woken client's would
        closed = actor.closed_by_broker()
        if factor < 1 and closed and client.net is self.world.net:
            raise Violation("heartbeat", f"c0 closed after a heartbeat stall of {factor * HEARTBEAT} s")
        if factor > 3 and not closed:
            raise Violation("heartbeat", f"c0 still open after a heartbeat stall of {factor * HEARTBEAT} s")

    def _slow(self, name: str, slow: int) -> None:
        """A consumer stops reading (its deliveries pile up in the network) or reads again."""
        client = self.actors[name].client
        if client is not None and client.net is self.world.net:
            client.reading = not slow
        self.world.run()

    def _alarm(self, on: int) -> None:
        self.world.config.limits.memory_high_watermark = ALARM_WATERMARK if on else _WATERMARK
        self.world.broker.run_command(lambda broker: None, self.world.now)
        self.world.run()
        self.oracle.alarm_set(bool(on))
        if not on:
            self.blocked.clear()

    def _advance(self, ms: int) -> None:
        self.world.advance(ms / 1000)

    def _sync(self, fail: int) -> None:
        self.world.sync(fail=bool(fail))

    def _drop(self, actor: str) -> None:
        self.actors[actor].drop()

    def _disk(self, full: int) -> None:
        self.world.fs.disk_full = bool(full)
        if full:
            self.oracle.disk_full(self.world.now)

    def _restart_step(self) -> None:
        self._boot(lambda: self._restart(self.world))

    def _cut(self, n: int, mode: str) -> None:
        w = self.world
        w.sync_until_cut(n)
        self._journal_moved()  # the sync's fsyncs done before the cut count
        self.oracle.power_lost(self.world.now)
        self._boot(lambda: w.crash(mode))

    def _crash(self, mode: str, media: str) -> None:
        self.oracle.power_lost(self.world.now, media=bool(media))
        if media:
            # a damaged stream tail is cut and its offsets reused; a damaged journal loses
            # removals, so old (even expired) messages may come back ahead of newer ones
            self.oracle.offsets.clear()
            self.oracle.fifo.clear()
        if media == "bit-flip":
            self.oracle.media_faults += 1
        elif media == "truncation":  # a cut at a record boundary looks like a clean end
            self.oracle.truncated = True
        self._boot(lambda: self.world.crash(mode, media or None))

    def _journal_moved(self) -> None:
        """Acks are durable once the journal was fsynced after them."""
        mark = self.world.journal_mark()
        if mark != self._journal:
            self._journal = mark
            self.oracle.journal_synced(self.world.now)

    def _restart(self, w: SimWorld) -> None:
        if w.restart():
            self.oracle.journal_synced(self.world.now)  # a clean close fsyncs the journal
        else:
            self.oracle.power_lost(self.world.now)  # acks written to a failing disk are not durable
        self._journal = w.journal_mark()

    def _boot(self, boot: Any) -> None:
        try:
            boot()
        except StoreError as exc:
            if not self.oracle.media_faults and not self.oracle.truncated:
                raise Violation("refused-to-boot", f"the store refused an undamaged disk: {exc}") from None
            self.stopped = f"the store refused the damaged disk: {exc}"

    def finish(self) -> None:
        """Answer everything, cut the power, boot, drain every queue and the stream, check."""
        w = self.world
        w.fs.disk_full = False
        self._alarm(0)
        for actor in self.actors.values():  # slow readers read again; half-open peers are abandoned
            if actor.client is not None and actor.client.net is w.net and actor.frozen_at is None:
                actor.client.reading = True
        w.run()
        for _ in range(4):  # a completed sync may start another (a moved message's source removal)
            w.sync()
        self.collect()
        unanswered = sum(a.unanswered() for a in self.actors.values() if hasattr(a, "unanswered"))
        self._journal_moved()
        self.oracle.power_lost(self.world.now, final=True)
        self._boot(lambda: w.crash("drop"))
        if self.stopped:
            return
        w.advance(max(DELAYS_MS) / 1000 + 1)  # every delayed message is due
        present: list[int] = []
        for queue in (*QUEUES, STREAM):
            drain = AmqpConsumer(f"drain-{queue}", w, self.oracle, queue, prefetch=0 if queue != STREAM else 60_000)
            try:
                drain.ensure()
            except Refused as exc:
                if not self.oracle.media_faults and not self.oracle.truncated:
                    raise Violation("refused", str(exc)) from None
                self.stopped = f"{exc} (after a media fault)"
                return
            w.run()
            drain.collect()
            if queue == STREAM and drain.first_offset not in (None, 0):
                raise Violation("stream-gap", f"{queue}: the stream now starts at {drain.first_offset}, not 0")
            present.extend(mid for _, mid in drain.unacked)
            drain.client.send(spec.ConnectionClose(200, "", 0, 0))
            w.run()
        w.take_reports()
        dead_dropped = any("dead-lettered message" in r for r in w.reports)
        self.oracle.check_final(w.now, present, bool(w.reports), unanswered, dead_dropped)
        self._check_deleted()

    def _check_deleted(self) -> None:
        """A queue whose deletion was durable must not be back after the reboot."""
        c: Any = self.world.connect("amqp")
        c.amqp_open()
        for i, name in enumerate(sorted(self.oracle.deleted_durable), start=1):
            c.open_channel(i)
            ok = c.call(spec.QueueDeclare(queue=name, passive=True, channel=i))
            if isinstance(ok, spec.QueueDeclareOk):
                raise Violation("deleted-queue-back", f"queue {name} is back after its durable deletion, "
                                                      f"with {ok.message_count} message(s)")
        c.close()
        self.world.run()



def _settle(op: str) -> Any:
    return lambda run, actor, n: run.actors[actor].step(op, n)


#: step kind -> what runs it (with the step's arguments)
_STEPS: dict[str, Any] = {
    "pub": _Run._pub,
    "tx": _Run._tx,
    "txack": _Run._txack,
    "resend": _Run._resend,
    "churn": _Run._churn,
    "halfopen": _Run._half_open,
    "stall": _Run._stall,
    "slow": _Run._slow,
    "alarm": _Run._alarm,
    "ack": _settle("ack"),
    "nack": _settle("nack"),
    "reject": _settle("reject"),
    "cancel": _settle("cancel"),
    "advance": _Run._advance,
    "sync": _Run._sync,
    "drop": _Run._drop,
    "disk": _Run._disk,
    "restart": _Run._restart_step,
    "cut": _Run._cut,
    "crash": _Run._crash,
}

def run_steps(seed: int, steps: list[Step], store: StoreFactory | None = None, debug: bool = False) -> Result:
    """Run ``steps`` under ``seed``; the result names the first violation (or none)."""
    result = Result(seed, steps)
    with quiet_store_log():
        run: _Run | None = None
        try:
            run = _Run(seed, store or segment_store)
            for i, step in enumerate(steps):
                result.failed_at = i
                try:
                    run.step(step)
                except Refused as exc:
                    if not run.oracle.media_faults and not run.oracle.truncated:
                        raise Violation("refused", str(exc)) from None
                    run.stopped = f"{exc} (after a media fault)"

                result.trace.append(f"{i} {json.dumps(step)} {run.world.digest()}")
                if run.stopped:
                    result.note = run.stopped
                    break
            else:
                result.failed_at = len(steps)
                run.finish()
                result.note = run.stopped
            result.failed_at = None
        except Violation as exc:
            result.violation, result.kind = str(exc), exc.kind
        except Exception as exc:  # the broker or the store blew up: a finding too
            if debug:
                raise
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            result.violation = f"exception: {type(exc).__name__}: {exc} ({tb.filename}:{tb.lineno})"
            result.kind = f"exception:{type(exc).__name__}"
        if run is not None:
            result.faults = dict(run.world.fs.counts)
            result.trace.append(f"end {run.world.digest()} {result.kind or 'ok'} {json.dumps(run.oracle.counts)}")
    return result


def run_seed(seed: int, faults: frozenset[str] | set[str] = frozenset(FAULTS), store: StoreFactory | None = None,
             steps: int | None = None) -> Result:
    return run_steps(seed, generate(seed, faults, steps), store)


def shrink(result: Result, store: StoreFactory | None = None, budget: int = 400) -> Result:
    """Delta debugging over the step list: the shortest list found that fails with the same kind."""
    best = result
    steps = result.steps[: (result.failed_at or len(result.steps)) + 1]
    tries = 0

    def fails(cand: list[Step]) -> Result | None:
        nonlocal tries
        tries += 1
        r = run_steps(result.seed, cand, store)
        return r if r.kind == result.kind else None

    if (r := fails(steps)) is not None:
        best = r
    else:
        steps = result.steps
    n = 2
    while len(steps) >= 2 and tries < budget:
        chunk = max(1, len(steps) // n)
        reduced = False
        for i in range(0, len(steps), chunk):
            cand = steps[:i] + steps[i + chunk:]
            if (r := fails(cand)) is not None:
                steps, best, reduced = cand, r, True
                n = max(n - 1, 2)
                break
            if tries >= budget:
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(steps), n * 2)
    return best
