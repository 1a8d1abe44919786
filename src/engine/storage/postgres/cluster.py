"""``ClusterStore``: the PostgreSQL store of one node of a cluster (DESIGN.md section 8).

Differences from a lone ``PostgresStore`` on the same schema:

- no advisory lock: every node shares the schema;
- the node registers itself (``nodes``: a row with its address and heartbeat); its number gives it
  id spaces of its own for new queues and messages (``no << 32`` and ``no << 40``), so nodes never
  write the same row ids;
- messages are loaded, written and removed only for the queues this node leads (``led``: queue id
  -> lease epoch); every transaction that writes messages ends with ``fence`` (same transaction),
  so once another node took a lease over, nothing of ours for that queue commits again. A fenced
  batch loses the writes of those queues (they are the new leader's now) and ``on_fenced`` is told
  which queues, so the node steps down. A stream's appends, retention and producer ids are fenced
  the same way (``StreamWork.led``); streams get ids in the node's own space too;
- every definition change is also appended to ``changes``, in the same transaction, for the other
  nodes to apply (``definitions_since``); while ``muted`` (applying another node's change) nothing
  is written at all.

Membership upkeep (``heartbeat``) runs on its own connection from the cluster thread of the
server (``servers.cluster``), never on the loop thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from ..._message import Message
from ...cluster.changes import Muting, encode_args
from ...model.policies import declared_locator
from ...records import _decode_message
from ...store import BindingDef, ExchangeDef, QueueDef, Recovered, StoredMessage, StoreError
from ...streams import StreamLog, StreamSettings
from ...streams._pglog import StreamWork, stream_ddl
from ._batch import Item, _Group
from ._cluster_sql import FENCED, cluster_ddl, cluster_statements, defs_key
from ._schema import schema_ddl
from .store import CONNECT_KW, PostgresStore, _reason, _safe_dsn

__all__ = ["ClusterStore", "Change", "Forwarded", "Heartbeat", "cluster_view"]

log = logging.getLogger("sansmq.cluster")

#: the header of a dead letter: one is forwarded again after a failed send, never given up
DEATH_HEADER = "x-death"
QUEUE_ID_SHIFT = 32
MESSAGE_ID_SHIFT = 40


@dataclass(slots=True)
class Change:
    """One definition change made by another node: ``op`` and its JSON ``params``."""

    serial: int
    node: str
    op: str
    params: dict[str, Any]
    at: float  # when it was committed (the database's clock, seconds since the epoch)


@dataclass(slots=True)
class Heartbeat:
    """What one round of membership upkeep found."""

    lost: list[tuple[str, str]]  # queues whose lease moved away from this node
    acquired: dict[tuple[str, str], list[StoredMessage]]  # queues taken over, with their messages
    leaders: dict[tuple[str, str], str]  # every queue another node leads -> that node
    #: the lease epochs of ``acquired``: the loop's takeover adopts them (``ClusterStore.adopt``)
    epochs: dict[tuple[str, str], int] = field(default_factory=dict)


class ClusterStore(Muting, PostgresStore):
    """The store of node ``node`` (advertising ``address`` to its peers); leases last ``lease``
    seconds past the last heartbeat."""

    def __init__(self, dsn: str, node: str, *, address: str = "", lease: float = 5.0, sync: bool = True,
                 schema: str = "sansmq", retry_interval: float = 0.5) -> None:
        self.node = node
        self.address = address
        self.lease = lease
        self.number = 0
        self._csql = cluster_statements(schema)
        self._defs_key = defs_key(schema)
        #: queue id -> lease epoch, for the queues this node leads
        self.led: dict[int, int] = {}
        self._defs_pending = False
        self.last_serial = 0
        #: at start: the queues other nodes lead -> their leader
        self.remote_leaders: dict[tuple[str, str], str] = {}
        self.first_message_id = 0
        #: the credential of the node-to-node links (in the database: only nodes can read it)
        self.secret = ""
        #: node -> the address its node-to-node link listens on
        self.addresses: dict[str, str] = {}
        #: live, not drained nodes -> how many queues they lead (``balanced`` placement), as of the
        #: last heartbeat
        self.load: dict[str, int] = {}
        #: ``sansmq cluster drain`` put this node in maintenance: it leads no queue, new ones included
        self.drained = False
        #: a new queue's leader locator (vhost, name, declared arguments): the declared argument or
        #: else the policy's (the model's ``Policies.leader_locator``, set when the node is attached)
        self.locator: Callable[[str, str, dict[str, Any] | None], str | None] = declared_locator
        #: queues declared here whose leader placement chose another node -> that node (the model
        #: marks them remote right after the declare: engine.cluster.membership.placed)
        self.placed: dict[tuple[str, str], str] = {}
        #: messages for queues other nodes lead: (sync token, leader, vhost, queue, message), sent
        #: by ``sync``
        self._outbox: list[_Forward] = []
        #: the dead letters forwarded since the last removal: the removal that follows them (the
        #: dead message's, at least once) waits until their leaders took them (``_Held``)
        self._dead_letters: list[_Forward] = []
        #: forwarded messages given up (their sync failed: their publishers got a nack)
        self.forwards_failed = 0
        #: hands one leader's messages (leader, vhost, items) to its sender, which reports back
        #: through ``forwarded`` once that leader committed them or the send failed
        #: (``servers.cluster.link.Forwarders``); never waits for the leader
        self.dispatch: Callable[[str, str, list[_Forward]], None] | None = None
        #: token -> how many of its forwards wait for their leader's confirm
        self._in_flight: dict[int, int] = {}
        #: the highest token this node's own commit covers
        self.local_through = 0
        #: called (from a worker thread) with the (vhost, queue) names this node was fenced off
        self.on_fenced: Callable[[list[tuple[str, str]]], None] | None = None
        self._hb_lock = threading.Lock()
        self._hb_conn: psycopg.Connection[Any] | None = None
        self._create_schema(dsn, schema)
        super().__init__(dsn, sync=sync, schema=schema, retry_interval=retry_interval)
        self._streams.own_ids(self.number << QUEUE_ID_SHIFT, (self.number + 1) << QUEUE_ID_SHIFT)

    def _create_schema(self, dsn: str, schema: str) -> None:
        """Every table and the fence function, created by one node at a time (nodes starting
        together would otherwise race on the catalog: "tuple concurrently updated")."""
        try:
            with psycopg.connect(dsn, autocommit=True, **CONNECT_KW) as conn, conn.transaction():
                conn.execute(self._csql["defs_lock"], (self._defs_key,))
                conn.execute(schema_ddl(schema))
                conn.execute(stream_ddl(schema))
                conn.execute(cluster_ddl(schema))
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store {_safe_dsn(dsn)}: {_reason(exc)}") from None

    # -- connection: shared, nothing to claim -------------------------------------------------------
    def _claim(self, conn: psycopg.Connection[Any], wait: float) -> bool:
        self._bound_idle_transactions(conn)
        return True

    def _bound_idle_transactions(self, conn: psycopg.Connection[Any]) -> None:
        """A transaction of ours left open longer than the lease is ended by the server. A node
        paused (SIGSTOP, a VM pause) inside one holds its lease rows locked, and the others' takeover
        skips locked rows (a joining node's waits on them): its queues would get no new leader until
        it resumed. Our transactions never wait on us in between (one pipeline, or a few statements
        in a row), so only a paused or starved node meets this bound; its commit then fails (nack)."""
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                     (str(max(int(self.lease * 1000), 100)),))

    # -- start: register, take leases, load what this node leads -----------------------------------
    def _load(self, conn: psycopg.Connection[Any]) -> Recovered:
        c = self._csql
        self._sql.update(c)  # the batch's cluster statements, and load_messages of the led queues
        with conn.transaction():
            conn.execute(c["defs_lock"], (self._defs_key,))
            row = conn.execute(c["register"], {"name": self.node, "address": self.address,
                                               "lease": self.lease}).fetchone()
            assert row is not None
            self.number, self.drained = row[0], bool(row[1])
            self.secret = conn.execute(c["secret"]).fetchone()[0]  # type: ignore[index]
            self.addresses = dict(conn.execute(c["addresses"]).fetchall())
            self.load = dict(conn.execute(c["node_load"]).fetchall())
            conn.execute(c["lease_orphans"], {"me": self.node})
            conn.execute(c["lease_acquire"], {"me": self.node, "lease": self.lease, "restart": True})
            self.last_serial = conn.execute(c["last_change"]).fetchone()[0]  # type: ignore[index]
            rec = super()._load(conn)
            lo = self.number << QUEUE_ID_SHIFT
            ids = conn.execute(c["max_ids"], {"lo": self.number << MESSAGE_ID_SHIFT,
                                              "hi": (self.number + 1) << MESSAGE_ID_SHIFT}).fetchone()
            qids = conn.execute(c["max_ids"], {"lo": lo, "hi": (self.number + 1) << QUEUE_ID_SHIFT}).fetchone()
            self.led = dict(conn.execute(c["lease_mine"], (self.node,)).fetchall())
            self.remote_leaders = {(v, n): leader for v, n, leader in conn.execute(c["lease_leaders"], (self.node,))}
        assert ids is not None and qids is not None
        # new messages and queues get ids in this node's own spaces (recovered ones keep theirs)
        rec.max_message_id = 0
        self.first_message_id = max(ids[0] or 0, self.number << MESSAGE_ID_SHIFT)
        self._next_qid = max(qids[1] or 0, lo) + 1
        log.info("cluster node %s (no. %d) leads %d of %d queues", self.node, self.number, len(self.led),
                 len(rec.queues))
        return rec

    def _load_params(self) -> tuple[Any, ...] | None:
        return (self.node,)

    def leads(self, vhost: str, queue: str) -> bool:
        qid = self._qids.get((vhost, queue))
        return qid is not None and qid in self.led

    def queue_id(self, vhost: str, queue: str) -> int | None:
        return self._qids.get((vhost, queue))

    def _log(self, op: str, params: dict[str, Any]) -> None:
        self._op("log_change", self.node, op, json.dumps(params))
        self._defs_pending = True

    def commit_definitions(self) -> None:
        """Commit the batch if it holds definition changes (the cluster thread, every poll): users,
        permissions and policies bring no Sync of their own, and the other nodes must see them."""
        if self._defs_pending:
            self._defs_pending = False
            # the database part only: forwards are taken by the sync worker alone (a forward's
            # token holds its publishers' confirms from that token's sync on)
            PostgresStore.sync(self, 0)

    # -- entities: written and logged ---------------------------------------------------------------
    def add_vhost(self, name: str) -> None:
        if not self.muted:
            super().add_vhost(name)
            self._log("vhost.add", {"name": name})

    def delete_vhost(self, name: str) -> None:
        if not self.muted:
            super().delete_vhost(name)
            self._log("vhost.delete", {"name": name})

    def put_doc(self, kind: str, key: str, doc: str) -> None:
        if not self.muted:
            super().put_doc(kind, key, doc)
            self._log("doc.put", {"kind": kind, "key": key, "doc": doc})

    def delete_doc(self, kind: str, key: str) -> None:
        if not self.muted:
            super().delete_doc(kind, key)
            self._log("doc.delete", {"kind": kind, "key": key})

    def add_exchange(self, xdef: ExchangeDef) -> None:
        if not self.muted:
            super().add_exchange(xdef)
            self._log("exchange.add", {**asdict(xdef), "args": encode_args(xdef.args)})

    def delete_exchange(self, vhost: str, name: str) -> None:
        if not self.muted:
            super().delete_exchange(vhost, name)
            self._log("exchange.delete", {"vhost": vhost, "name": name})

    def add_queue(self, qdef: QueueDef) -> None:
        """A new durable queue, led by this node (``client-local``) or, ``balanced``, by the live
        node leading fewest queues."""
        if self.muted:
            return
        super().add_queue(qdef)
        qid = self._qids[(qdef.vhost, qdef.name)]
        leader = self._placement(qdef)
        self._op("lease_new", qid, leader, self.lease)
        if leader == self.node:
            self.led[qid] = 1
        else:
            self.placed[(qdef.vhost, qdef.name)] = leader
        self._log("queue.add", {**asdict(qdef), "args": encode_args(qdef.args), "id": qid, "leader": leader})

    def _placement(self, qdef: QueueDef) -> str:
        locator = self.locator(qdef.vhost, qdef.name, qdef.args)
        load = self.load
        if locator in (None, "client-local") and not self.drained or not load:
            return self.node
        leader = min(load, key=lambda n: (load[n], n))
        load[leader] += 1  # the next declares before the next heartbeat spread on
        return leader

    def delete_queue(self, vhost: str, name: str) -> None:
        if self.muted:
            self._streams.forget(vhost, name)  # its node deleted its log (if a stream)
            return
        qid = self._qids.get((vhost, name))
        super().delete_queue(vhost, name)
        if qid is not None:
            self.led.pop(qid, None)
            self._op("lease_drop", qid)
        self._log("queue.delete", {"vhost": vhost, "name": name})

    def add_binding(self, bdef: BindingDef) -> None:
        if not self.muted:
            super().add_binding(bdef)
            self._log("binding.add", {**asdict(bdef), "args": encode_args(bdef.args)})

    def delete_binding(self, bdef: BindingDef) -> None:
        if not self.muted:
            super().delete_binding(bdef)
            self._log("binding.delete", {**asdict(bdef), "args": encode_args(bdef.args)})

    def forget_queue(self, vhost: str, name: str, qid: int | None = None, led: bool = False) -> None:
        """Another node created (``qid``; ``led``: placed here, lease epoch 1) or deleted (None)
        queue ``name``: keep the id map right."""
        if qid is None:
            old = self._qids.pop((vhost, name), None)
            if old is not None:
                self.led.pop(old, None)
        else:
            self._qids[(vhost, name)] = qid
            if led:
                self.led[qid] = 1

    def stream(self, vhost: str, name: str, settings: StreamSettings | None = None) -> StreamLog:
        """A stream declared by another node (applied here muted) is read from the database, not
        created again."""
        return self._streams.open(vhost, name, settings, create=not self.muted)

    def adopt(self, vhost: str, queue: str, epoch: int) -> None:
        """The loop took ``queue`` over at lease ``epoch`` (loop thread): its writes count from now."""
        qid = self._qids.get((vhost, queue))
        if qid is not None:
            self.led[qid] = epoch

    # -- messages: only for the queues this node leads ----------------------------------------------
    def enqueue(self, vhost: str, queue: str, msg: Message) -> None:
        qid = self._qids.get((vhost, queue))
        if qid is None or self.muted:
            return
        if qid not in self.led:  # stepped down (fenced) before the model heard of it: refused, not lost
            raise StoreError(f"queue '{queue}' in vhost '{vhost}' is no longer led by node {self.node}")
        super().enqueue(vhost, queue, msg)

    def remove(self, vhost: str, queue: str, msg_id: int) -> None:
        if self._qids.get((vhost, queue)) not in self.led:
            return
        with self._lock:
            dead, self._dead_letters = self._dead_letters, []
            if dead:  # at least once: removed once every one of these is at its leader
                held = _Held(len(dead), (vhost, queue, msg_id))
                for item in dead:
                    item.held = held
                return
        super().remove(vhost, queue, msg_id)

    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        if self._qids.get((vhost, queue)) in self.led:
            super().update_delivery(vhost, queue, msg_id, delivery_count)

    # -- queues led elsewhere: their messages go to the leader with the sync ----------------------------
    def forward(self, token: int, leader: str, vhost: str, queue: str, msg: Message) -> None:
        """Send ``msg`` to ``queue`` on its leader with the sync of ``token`` (loop thread)."""
        with self._lock:
            item = _Forward(token, leader, vhost, queue, msg)
            self._outbox.append(item)
            if DEATH_HEADER in msg.headers:
                self._dead_letters.append(item)

    def sync(self, token: int) -> None:
        """Hand the messages for other leaders to their senders (``dispatch``, one per leader, not
        waited for), then our own commit. Two nodes forwarding to each other's queues would
        otherwise wait on each other: a leader confirms a forwarded publish only after its own
        sync. A publish through this node is still confirmed only once its queue's leader stored
        it: the token's completion waits for its forwards too (``confirmed_through``), and a dead
        letter an at-least-once quorum queue sends to a queue led elsewhere is stored there before
        the dead message's removal here commits (``remove`` holds it until ``forwarded``).

        Messages of later tokens (appended after this sync was asked for, taken here early) hold
        their own token's completion, not this one's."""
        with self._lock:
            outbox, self._outbox = self._outbox, []
            self._dead_letters = []  # taken: a removal from now on is not held by them
            for item in outbox:
                if item.token:  # a dead letter kept after a failed send has no publisher waiting
                    self._in_flight[item.token] = self._in_flight.get(item.token, 0) + 1
        unsent = None
        if outbox:
            try:
                self._dispatch(outbox)
            except StoreError as exc:
                unsent = exc
                self.forwarded(outbox, exc)
        super().sync(token)
        if token > self.local_through:
            self.local_through = token
        if unsent is not None:  # their publishers get a nack
            raise unsent

    def forwards_waiting(self) -> bool:
        """Messages for other leaders wait for a sync (dead letters kept after a failed send)."""
        return bool(self._outbox)

    def confirmed_through(self, token: int) -> int:
        """``token``, or less while a forward of ``token`` or before waits for its leader's confirm:
        the highest token whose publishers may be confirmed (the broker's ``sync_gate``)."""
        with self._lock:
            if self._in_flight:
                return min(token, min(self._in_flight) - 1)
        return token

    def _dispatch(self, outbox: list[_Forward]) -> None:
        """Hand ``outbox`` to the senders, one batch per (leader, vhost) in order."""
        by_leader: dict[tuple[str, str], list[_Forward]] = {}
        for item in outbox:
            vhost, queue = item.vhost, item.queue
            # a queue whose leader changed since: to its leader now (this node's own link when
            # this node took it over: a kept dead letter)
            leader = self.node if self.leads(vhost, queue) else self.remote_leaders.get((vhost, queue), item.leader)
            by_leader.setdefault((leader, vhost), []).append(item)
        if self.dispatch is None:
            raise StoreError("no node-to-node link to forward messages to their queues' leaders")
        for (leader, vhost), items in by_leader.items():
            self.dispatch(leader, vhost, items)

    def forwarded(self, items: list[_Forward], error: StoreError | None) -> Forwarded:
        """The leader confirmed ``items`` (``error`` None) or they could not be sent (loop thread).
        A failure gives the publishers' messages up (their tokens' publishers get a nack, told
        before their tokens stop holding the confirms back) and keeps the dead letters
        (``x-death``) for the next sync (their leader may be back, or replaced); a success lets
        the dead messages' removals held for them go, committed by the next sync."""
        failed_token = 0
        released = False
        with self._lock:
            for item in items:
                if item.token:
                    left = self._in_flight[item.token] - 1
                    if left:
                        self._in_flight[item.token] = left
                    else:
                        del self._in_flight[item.token]
            if error is not None:
                keep = [item for item in items if DEATH_HEADER in item.msg.headers]
                self.forwards_failed += len(items) - len(keep)
                failed_token = max((item.token for item in items if DEATH_HEADER not in item.msg.headers),
                                   default=0)
                for item in keep:
                    item.token = 0
                self._outbox[:0] = keep  # sent again by the next sync (the heartbeat asks for one)
        if error is None:
            for item in items:
                held = item.held
                if held is not None:
                    held.waiting -= 1
                    if not held.waiting:  # the dead message's removal: committed by the next sync
                        super().remove(*held.removal)
                        released = True
        return Forwarded(failed_token, released)

    # -- writing: the change log in order, the fence last ---------------------------------------------
    def _write(self, conn: psycopg.Connection[Any], batch: list[Item]) -> None:
        c = self._csql
        if any(type(item) is tuple and item[0] in ("log_change", "add_queue") for item in batch):
            conn.execute(c["defs_lock"], (self._defs_key,))
            self._check_declares(conn, batch)
        super()._write(conn, batch)
        touched: set[int] = set()
        for item in batch:
            if isinstance(item, _Group):
                touched.update(k[0] for k in item.ins)
                touched.update(k[0] for k in item.cnt)
                touched.update(k[0] for k in item.dels)
            elif isinstance(item, StreamWork):  # a stream's appends and retention: its leader's alone
                touched.update(qid for key in item.led.values() if (qid := self._qids.get(key)) is not None)
        if touched:
            qids = sorted(touched)
            led = self.led
            conn.execute(c["fence"], (self.node, qids, [led.get(q, -1) for q in qids]))

    def _check_declares(self, conn: psycopg.Connection[Any], batch: list[Item]) -> None:
        """Raise ``DeclaredElsewhere`` when a queue this batch creates was stored by another node
        since this node declared it (both declared it before hearing of the other's: Celery
        workers starting together on several nodes). Checked under the definitions lock, which
        every node's declare takes, so no declare slips in between."""
        new = {item[1][0]: (item[1][1], item[1][2]) for item in batch
               if type(item) is tuple and item[0] == "add_queue"}
        if not new:
            return
        names = list(new.values())
        taken = set(conn.execute(self._csql["queues_taken"], ([v for v, _ in names], [n for _, n in names])))
        if taken:
            raise DeclaredElsewhere({qid: key for qid, key in new.items() if key in taken})

    def _kept_after_failure(self, batch: list[Item], exc: Exception) -> list[Item]:
        if isinstance(exc, DeclaredElsewhere):
            # the other node's queue is the queue: ours (its id, lease, change log entry and the
            # messages written to it meanwhile, nacked) is dropped; the other's queue.add, applied
            # here by the definitions poll, brings its id, and the heartbeat its leader
            log.warning("cluster node %s: %s declared by another node first; it leads them", self.node,
                        ", ".join(f"{v}/{n}" for v, n in exc.queues.values()))
            return self._dropped(batch, set(exc.queues), list(exc.queues.values()))
        if not (isinstance(exc, psycopg.Error) and exc.sqlstate == FENCED):
            return batch
        detail = exc.diag.message_detail or ""
        lost = {int(part) for part in detail.split(",") if part.strip()}
        names = [key for key, qid in list(self._qids.items()) if qid in lost]  # the loop thread adds to it
        log.error("cluster node %s: fenced off %s (their lease moved to another node); stepping down",
                  self.node, ", ".join(f"{v}/{n}" for v, n in names))
        return self._dropped(batch, lost, names)

    def _dropped(self, batch: list[Item], lost: set[int], names: list[tuple[str, str]]) -> list[Item]:
        """``batch`` less what it writes for the queues ``lost`` (ids; ``names``), which this node
        no longer leads: it steps down from them (``on_fenced``)."""
        for qid in lost:
            self.led.pop(qid, None)
        if self.on_fenced is not None:
            self.on_fenced(names)
        lost_keys = set(names)
        for item in batch:
            if isinstance(item, StreamWork):
                item.without({sid for sid, key in item.led.items() if key in lost_keys})
        return [_without(item, lost) if isinstance(item, _Group) else item for item in batch
                if not _creates(item, lost)]

    # -- membership upkeep (the cluster thread, its own connection) -----------------------------------
    def _upkeep_conn(self) -> psycopg.Connection[Any]:
        conn = self._hb_conn
        if conn is None or conn.closed or conn.broken:
            conn = self._hb_conn = psycopg.connect(self.dsn, autocommit=True, **CONNECT_KW)
            self._bound_idle_transactions(conn)
        return conn

    def _upkeep(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        with self._hb_lock:
            try:
                return fn(self._upkeep_conn())
            except psycopg.Error as exc:
                conn, self._hb_conn = self._hb_conn, None
                if conn is not None:
                    conn.close()
                raise StoreError(f"cluster upkeep: {_reason(exc)}") from None

    def heartbeat(self, take_over: bool = True) -> Heartbeat:
        """Beat, renew this node's leases, take over expired ones (``take_over``) and read the
        messages of those from the database (failover is recovery)."""
        c = self._csql

        def run(conn: psycopg.Connection[Any]) -> Heartbeat:
            with conn.transaction():
                row = conn.execute(c["heartbeat"], (self.address, self.node)).fetchone()
                self.drained = bool(row and row[0])
                if self.drained:  # hands its leases over as a shutdown does (and takes none below)
                    conn.execute(c["lease_release"], (self.node,))
                else:
                    conn.execute(c["lease_renew"], {"me": self.node, "lease": self.lease})
                got: dict[int, int] = {}
                if take_over:
                    got = dict(conn.execute(c["lease_acquire"], {"me": self.node, "lease": self.lease,
                                                                 "restart": False}).fetchall())
                mine = dict(self.led)
                # a lease row not committed yet (a queue declared since the last sync) is no loss
                lost = [q for q, leader, e in conn.execute(c["lease_check"], (list(mine),))
                        if leader != self.node or e != mine[q]]
                leaders = {(v, n): leader for v, n, leader in conn.execute(c["lease_leaders"], (self.node,))}
                self.addresses = dict(conn.execute(c["addresses"]).fetchall())
                self.load = dict(conn.execute(c["node_load"]).fetchall())
            self.remote_leaders = leaders
            for q in lost:
                self.led.pop(q, None)
            acquired: dict[tuple[str, str], list[StoredMessage]] = {}
            epochs: dict[tuple[str, str], int] = {}
            if got:
                names = {qid: (v, n) for qid, v, n in conn.execute(c["queue_names"], (list(got),))}
                for qid in got:
                    if qid in names:
                        acquired[names[qid]] = []
                        epochs[names[qid]] = got[qid]
                        self._qids[names[qid]] = qid
                missing = 0
                for qid, _mid, count, payload in conn.execute(c["load_queue_messages"], (list(names),)):
                    if payload is None:
                        missing += 1
                        continue
                    # it may have been delivered by the failed leader: flagged redelivered
                    acquired[names[qid]].append(StoredMessage(_decode_message(payload), max(count, 1)))
                if missing:
                    log.error("cluster node %s: %d queue entries taken over without their message row",
                              self.node, missing)
                # not led yet: the loop adopts the new epochs once it dropped what it may still hold
                # of these queues from an earlier lease (engine.cluster.membership.take_over)
            inverse = {qid: key for key, qid in list(self._qids.items())}  # the loop thread adds to it
            return Heartbeat([inverse[q] for q in lost if q in inverse], acquired, leaders, epochs)

        return self._upkeep(run)  # type: ignore[no-any-return]

    def definitions_since(self) -> list[Change]:
        """Definition changes committed by other nodes since the last call, in serial order."""
        def run(conn: psycopg.Connection[Any]) -> list[Change]:
            rows = conn.execute(self._csql["changes_since"], (self.last_serial,)).fetchall()
            out = []
            for serial, node, op, params, at in rows:
                self.last_serial = serial
                if node != self.node:
                    out.append(Change(serial, node, op, json.loads(params), float(at)))
            return out

        return self._upkeep(run)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Commit what is pending, then leave: this node's leases and heartbeat run out at once, so
        the other nodes take its queues over now rather than a lease later (a graceful shutdown)."""
        super().close()
        c = self._csql

        def leave(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute(c["lease_release"], (self.node,))
                conn.execute(c["node_leave"], (self.node,))

        try:
            self._upkeep(leave)
        except StoreError as exc:
            log.warning("cluster node %s: could not hand its queues over on shutdown: %s", self.node, exc)
        with self._hb_lock:
            if self._hb_conn is not None:
                self._hb_conn.close()
                self._hb_conn = None


@dataclass(slots=True)
class Forwarded:
    """What settling a batch of forwards found: ``failed_token``, the highest token whose
    publishers must be nacked (0: none); ``sync_needed``: a held removal was let go, for the next
    sync to commit (a dead letter kept is sent again by a later sync: not at once, which would spin
    while its leader is down)."""

    failed_token: int
    sync_needed: bool


@dataclass(slots=True)
class _Held:
    """A dead message's removal (vhost, queue, message id) waiting for ``waiting`` dead letters."""

    waiting: int
    removal: tuple[str, str, int]


@dataclass(slots=True)
class _Forward:
    """A message for ``queue``, led by ``leader``, sent with the sync of ``token``; ``held``: the
    removal its sending lets go (a dead letter's)."""

    token: int
    leader: str
    vhost: str
    queue: str
    msg: Message
    held: _Held | None = None


class DeclaredElsewhere(StoreError):
    """Queues this node created (id -> (vhost, name)) that another node stored first."""

    def __init__(self, queues: dict[int, tuple[str, str]]) -> None:
        super().__init__(f"queues declared by another node first: {sorted(queues.values())}")
        self.queues = queues


def _creates(item: Item, lost: set[int]) -> bool:
    """Whether ``item`` creates one of the queues ``lost``: its row, lease or change log entry."""
    if type(item) is not tuple:
        return False
    op, params = item
    if op in ("add_queue", "lease_new"):
        return params[0] in lost
    if op == "log_change" and params[1] == "queue.add":
        return json.loads(params[2])["id"] in lost
    return False


def _without(group: _Group, lost: set[int]) -> _Group:
    """``group`` less the changes of the queues in ``lost``."""
    kept = _Group()
    kept.msgs = group.msgs
    kept.ins = {k: v for k, v in group.ins.items() if k[0] not in lost}
    kept.cnt = {k: v for k, v in group.cnt.items() if k[0] not in lost}
    kept.dels = {k for k in group.dels if k[0] not in lost}
    kept.touched = group.touched
    return kept


def cluster_view(dsn: str, schema: str = "sansmq") -> dict[str, Any]:
    """Nodes and leases as the database has them (``sansmq cluster status``, ``/api/nodes``)."""
    c = cluster_statements(schema)
    try:
        with psycopg.connect(dsn, autocommit=True, **CONNECT_KW) as conn:
            nodes = [{"name": n, "number": no, "address": a, "started": s.isoformat(), "heartbeat": h.isoformat(),
                      "running": bool(alive), "heartbeat_age": float(age), "drained": bool(drained)}
                     for n, no, a, s, h, alive, age, drained in conn.execute(c["nodes"])]
            leases = [{"vhost": v, "queue": q, "leader": ld, "epoch": e, "expires_in": float(left), "target": t,
                       "id": qid} for v, q, ld, e, _x, left, t, qid in conn.execute(c["leases"])]
    except psycopg.Error as exc:
        raise StoreError(f"cluster status: {_reason(exc)}") from None
    return {"nodes": nodes, "leases": leases}
