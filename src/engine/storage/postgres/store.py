"""``PostgresStore``: the broker's durable state in a PostgreSQL database (psycopg 3).

Loop-thread methods never touch the database: they append to an in-memory batch (``_batch``) under
a short lock. ``sync(token)`` (a server worker thread) takes the whole batch and writes it in ONE
transaction, sent as one pipeline (BEGIN, one ``unnest`` statement per kind of change, COMMIT: a
single round trip); its COMMIT, with
``synchronous_commit`` on, is the fsync. One commit therefore covers every message appended since
the previous sync (group commit). ``sync=False`` sets ``synchronous_commit`` off: the commit
returns before the WAL reaches the disk (PostgreSQL's own trade-off; a database crash may lose the
last confirmed transactions, a broker crash loses nothing it confirmed).

Failures (connection lost, server down, another broker owning the database): the transaction rolls
back, the batch is put back in front of what was appended meanwhile (every statement is an upsert
or an idempotent delete, so replaying a batch whose COMMIT outcome is unknown is harmless) and
``sync`` raises ``StoreError``: nothing in it is confirmed. Until a sync succeeds again, new
messages and entities are refused with ``StoreError`` (publishers get an ERROR / nack), while
removals (acks) are still accepted into the batch, so consumers keep working. A background thread
retries every ``retry_interval`` seconds (reconnecting), as does the next ``sync``.

Messages are immutable once published, so they are encoded (the segment store's message codec)
at sync time, on the worker thread, and only if still queued: a message acked before the sync
never costs an encoding or a row.

A multi-host DSN (``postgresql://h1:p1,h2:p2/db``: a primary and its standbys) is PostgreSQL
failover: libpq tries the hosts in order, and the store asks for ``target_session_attrs=read-write``
unless the DSN (or ``PGTARGETSESSIONATTRS``) says otherwise, so every (re)connection lands on the
current primary, never on a read-only standby that would refuse each commit for as long as it stays
first in the list.

A second broker on the same database and schema is refused: the store holds a session-level
advisory lock on the connection it writes through, and takes it again on every reconnect (ending
its own previous session first if the server still keeps it: a cut the server has not noticed).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import psycopg

from amqpproto import read_table, write_table

from ..._message import Message
from ...records import _decode_message, _encode_message
from ...store import BindingDef, ExchangeDef, QueueDef, Recovered, Store, StoredMessage, StoreError
from ...streams._pglog import PgStreams, StreamWork, stream_ddl
from ._batch import Item, _Group
from ._schema import lock_key, schema_ddl, statements

__all__ = ["PostgresStore"]

log = logging.getLogger("sansmq.store")

#: libpq settings that make a dead server or network show up as an error, not a hang
CONNECT_KW: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
    "application_name": "sansmq",
}


#: this session's identity: backend pids are reused, (pid, start time) is not
SESSION_SQL = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
#: the session holding an advisory lock given as its two oid halves (a bigint key is stored so)
HOLDER_SQL = (
    "SELECT a.pid, a.backend_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid = %s::oid"
    " AND l.objid = %s::oid AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def connect_options(dsn: str) -> dict[str, Any]:
    """libpq settings for ``dsn``: ``CONNECT_KW``, plus the primary only unless the user chose."""
    kw = dict(CONNECT_KW)
    try:
        given = "target_session_attrs" in psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        given = False  # a bad DSN: psycopg.connect reports it
    if not given and not os.environ.get("PGTARGETSESSIONATTRS"):
        kw["target_session_attrs"] = "read-write"
    return kw


def _args_out(args: dict[str, Any] | None) -> bytes | None:
    return None if args is None else write_table(args)


def _args_in(data: bytes | None) -> dict[str, Any] | None:
    return None if data is None else read_table(bytes(data), 0)[0]


class PostgresStore(Store):
    """Durable store in the PostgreSQL database ``dsn`` (``postgresql://user@host:port/db``).

    Opening connects, takes the database's advisory lock, creates the schema if needed and loads
    everything (``recover()`` hands it over); a failure raises ``StoreError``. The lock is waited
    for up to ``lock_wait`` seconds: after a broker was killed, PostgreSQL may take a moment to
    notice that its session is gone."""

    def __init__(self, dsn: str, *, sync: bool = True, schema: str = "sansmq",
                 retry_interval: float = 0.5, lock_wait: float = 5.0) -> None:
        self.dsn = dsn
        #: the DSN without its password, for logs
        self.display_dsn = _safe_dsn(dsn)
        self._connect_kw = connect_options(dsn)
        self.needs_sync = True
        self.fsync = sync
        self.schema = schema
        self.retry_interval = retry_interval
        self._sql = statements(schema)
        self._lock = threading.Lock()  # the batch
        self._sync_lock = threading.Lock()  # the connection; one sync at a time
        self._batch: list[Item] = []
        self._group: _Group | None = None  # the batch's last item when it is a group
        self._conn: psycopg.Connection[Any] | None = None
        self._session: tuple[Any, ...] | None = None  # (pid, backend_start) of the lock's session
        self._failed: str | None = None  # why the last sync failed (new data refused meanwhile)
        self._retrying = False
        self._closed = False
        self._qids: dict[tuple[str, str], int] = {}
        self._next_qid = 1
        self.dropped_on_recovery = 0  # entries whose message row was missing
        try:
            with self._sync_lock:
                conn = self._connection(lock_wait)
                with conn.transaction():
                    conn.execute(schema_ddl(schema))
                    conn.execute(stream_ddl(schema))
                self._recovered: Recovered | None = self._load(conn)
                self._streams = PgStreams(self, conn)  # stream queues' logs (engine.streams._pglog)
        except psycopg.Error as exc:
            self._drop_connection()
            raise StoreError(f"PostgreSQL store {self.display_dsn}: {_reason(exc)}") from None
        except StoreError:
            self._drop_connection()
            raise

    # -- connection ---------------------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        """A new connection (fault-injection tests override this)."""
        return psycopg.connect(self.dsn, autocommit=True, **self._connect_kw)

    def _connection(self, wait: float = 0.0) -> psycopg.Connection[Any]:
        """The open connection, or a new one holding the advisory lock, waiting up to ``wait``
        seconds for it (caller holds ``_sync_lock``)."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._drop_connection()
        conn = self._connect()
        try:
            conn.execute("SET synchronous_commit TO " + ("on" if self.fsync else "off"))
            locked = self._claim(conn, wait)
            if locked:
                # who we are, to recognise this session if the connection is lost but the
                # session is not
                self._session = conn.execute(SESSION_SQL).fetchone()
        except BaseException:
            conn.close()
            raise
        if not locked:
            conn.close()
            raise StoreError(f"database {self.display_dsn} is in use by another sansmq broker "
                             f"(schema {self.schema!r})")
        self._conn = conn
        log.info("PostgreSQL store: writing through %s:%s", conn.info.host, conn.info.port)
        return conn

    def _claim(self, conn: psycopg.Connection[Any], wait: float) -> bool:
        """Take the schema's advisory lock on ``conn`` (one broker per schema), waiting up to
        ``wait`` seconds; False when another broker holds it. A session of our own that still holds
        it (our connection was cut, but the server has not noticed: without server-side keepalives
        that can last hours) is ended first. A cluster node shares the schema and claims nothing
        (``storage.postgres.cluster``)."""
        key = lock_key(self.schema)
        deadline = time.monotonic() + wait
        ended = None
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if row and row[0]:
                return True
            holder = conn.execute(HOLDER_SQL, ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
            if holder is not None and holder == self._session and holder != ended:
                log.warning("PostgreSQL store: our previous session (backend %d) still holds the database's "
                            "lock; ending it", holder[0])
                conn.execute("SELECT pg_terminate_backend(%s)", (holder[0],))
                ended = holder
                deadline = max(deadline, time.monotonic() + 5.0)  # it ends within moments
            elif time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection may fail to close: it is gone either way
                pass

    # -- loading ------------------------------------------------------------------------------------
    def _load(self, conn: psycopg.Connection[Any]) -> Recovered:
        q = self._sql
        rec = Recovered()
        with conn.transaction():
            conn.execute(q["cleanup_entries"])
            conn.execute(q["cleanup_messages"])
            rec.vhosts = [r[0] for r in conn.execute(q["load_vhosts"])]
            rec.docs = {(kind, key): doc for kind, key, doc in conn.execute(q["load_docs"])}
            rec.exchanges = [ExchangeDef(v, n, t, d, a, i, _args_in(args))
                             for v, n, t, d, a, i, args in conn.execute(q["load_exchanges"])]
            names: dict[int, tuple[str, str]] = {}
            for qid, v, n, d, a, args in conn.execute(q["load_queues"]):
                rec.queues.append(QueueDef(v, n, d, a, _args_in(args)))
                names[qid] = (v, n)
                self._qids[(v, n)] = qid
                self._next_qid = max(self._next_qid, qid + 1)
            rec.bindings = [BindingDef(v, s, d, x, k, _args_in(args))
                            for v, s, d, x, k, args in conn.execute(q["load_bindings"])]
            decoded: dict[int, Message] = {}  # a message held by several queues is one object
            cur = conn.cursor(name="sansmq_recover")
            cur.itersize = 10_000
            cur.execute(q["load_messages"], self._load_params())
            for qid, mid, count, payload in cur:
                if payload is None:
                    self.dropped_on_recovery += 1
                    continue
                msg = decoded.get(mid)
                if msg is None:
                    msg = decoded[mid] = _decode_message(payload)
                rec.messages.setdefault(names[qid], []).append(StoredMessage(msg, count))
            cur.close()
        if self.dropped_on_recovery:
            log.warning("recovery: %d queue entries without their message row", self.dropped_on_recovery)
        return rec

    def _load_params(self) -> tuple[Any, ...] | None:
        """Parameters of the ``load_messages`` statement (a cluster node loads the queues it leads)."""
        return None

    def recover(self) -> Recovered:
        rec, self._recovered = self._recovered, None
        if rec is not None:
            return rec
        # asked again: write what is pending and read the database back
        self.sync(0)
        with self._sync_lock:
            try:
                return self._load(self._connection())
            except psycopg.Error as exc:
                self._drop_connection()
                raise StoreError(f"PostgreSQL store: {_reason(exc)}") from None

    # -- appending (loop thread) ----------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._failed is not None:
            raise StoreError(f"message store unavailable ({self._failed})")

    def _op(self, name: str, *params: Any) -> None:
        with self._lock:
            self._batch.append((name, params))
            self._group = None

    def _msgs(self) -> _Group:
        """The group message changes go to (caller holds ``_lock``)."""
        g = self._group
        if g is None:
            g = self._group = _Group()
            self._batch.append(g)
        return g

    def add_vhost(self, name: str) -> None:
        self._check_writable()
        self._op("add_vhost", name)

    def delete_vhost(self, name: str) -> None:
        self._op("delete_vhost", name)

    def put_doc(self, kind: str, key: str, doc: str) -> None:
        self._op("put_doc", kind, key, doc)

    def delete_doc(self, kind: str, key: str) -> None:
        self._op("delete_doc", kind, key)

    def add_exchange(self, xdef: ExchangeDef) -> None:
        self._check_writable()
        self._op("add_exchange", xdef.vhost, xdef.name, xdef.type, xdef.durable, xdef.auto_delete,
                 xdef.internal, _args_out(xdef.args))

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._op("delete_exchange", vhost, name)
        self._op("delete_exchange_bindings", vhost, name, name)

    def add_queue(self, qdef: QueueDef) -> None:
        self._check_writable()
        args = _args_out(qdef.args)
        key = (qdef.vhost, qdef.name)
        if key in self._qids:  # declared again over an existing one: replaced, messages and all
            self.delete_queue(qdef.vhost, qdef.name)
        qid = self._next_qid
        self._next_qid += 1
        self._qids[key] = qid
        self._op("add_queue", qid, qdef.vhost, qdef.name, qdef.durable, qdef.auto_delete, args)

    def delete_queue(self, vhost: str, name: str) -> None:
        qid = self._qids.pop((vhost, name), None)
        if qid is not None:
            self._op("delete_queue_messages", qid)
            self._op("delete_queue_entries", qid)
            self._op("delete_queue", qid)
        self._op("delete_queue_bindings", vhost, name)
        self.delete_stream(vhost, name)

    def _stream_logs(self) -> PgStreams:
        return self._streams

    def add_binding(self, bdef: BindingDef) -> None:
        self._check_writable()
        self._op("add_binding", bdef.vhost, bdef.source, bdef.dest, bdef.dest_is_exchange, bdef.key,
                 bdef.ident()[5], _args_out(bdef.args))

    def delete_binding(self, bdef: BindingDef) -> None:
        self._op("delete_binding", bdef.vhost, bdef.source, bdef.dest, bdef.dest_is_exchange, bdef.key,
                 bdef.ident()[5])

    def enqueue(self, vhost: str, queue: str, msg: Message) -> None:
        qid = self._qids.get((vhost, queue))
        if qid is None:
            return  # not a durable queue this store knows of
        self._check_writable()
        with self._lock:
            self._msgs().enqueue(qid, msg)

    def remove(self, vhost: str, queue: str, msg_id: int) -> None:
        qid = self._qids.get((vhost, queue))
        if qid is not None:
            with self._lock:
                self._msgs().remove(qid, msg_id)

    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        qid = self._qids.get((vhost, queue))
        if qid is not None:
            with self._lock:
                self._msgs().count(qid, msg_id, delivery_count)

    # -- writing (worker thread) ----------------------------------------------------------------------
    def sync(self, token: int) -> None:
        """Write everything appended so far in one transaction (a superset of what ``Sync(token)``
        covers); returns once it is committed."""
        self._sync(retry=True)

    def _sync(self, retry: bool) -> None:
        with self._sync_lock:
            if self._closed:
                return
            with self._lock:
                batch, self._batch, self._group = self._batch, [], None
                self._streams.current = None  # the next stream changes start a new chunk
            if not batch and self._failed is None:
                return
            reused = self._conn is not None and not self._conn.broken
            try:
                try:
                    self._commit(batch)
                except psycopg.OperationalError:
                    if not reused:
                        raise
                    # the connection we kept may have died while idle (server restart, idle
                    # timeout): one more try on a new one; replaying the batch is harmless
                    self._drop_connection()
                    self._commit(batch)
            except Exception as exc:  # noqa: BLE001 - whatever failed, nothing of the batch is lost
                batch = self._kept_after_failure(batch, exc)
                with self._lock:
                    self._batch[:0] = batch  # replayed first by the next sync
                    self._group = None
                self._drop_connection()
                reason = str(exc) if isinstance(exc, StoreError) else _reason(exc)
                if not isinstance(exc, (psycopg.Error, StoreError, OSError)):
                    log.exception("PostgreSQL store: unexpected error while committing")
                if self._failed is None:
                    log.error("PostgreSQL store: sync failed, refusing new messages until it works again: %s",
                              reason)
                self._failed = reason
                if retry and not self._retrying:
                    self._retrying = True
                    threading.Thread(target=self._retry_loop, name="sansmq-pg-retry", daemon=True).start()
                raise StoreError(f"message store cannot commit ({reason})") from None
            with self._lock:
                for item in batch:
                    if isinstance(item, StreamWork):
                        item.committed()
            if self._failed is not None:
                log.warning("PostgreSQL store: commits work again")
                self._failed = None

    def _kept_after_failure(self, batch: list[Item], exc: Exception) -> list[Item]:
        """What of a batch whose commit failed with ``exc`` is replayed: all of it (a cluster node
        drops the writes of queues it was fenced off)."""
        return batch

    def _commit(self, batch: list[Item]) -> None:
        conn = self._connection()
        # BEGIN, the batch and COMMIT go out as one pipeline: one round trip. After an error the
        # server skips the rest of it, COMMIT included; the connection is then dropped, so the
        # aborted transaction is rolled back with the session.
        try:
            with conn.pipeline():
                conn.execute("BEGIN")
                self._write(conn, batch)
                conn.execute("COMMIT")
        except BaseException:
            self._drop_connection()
            raise

    def _write(self, conn: psycopg.Connection[Any], batch: list[Item]) -> None:
        q = self._sql
        cur = conn.cursor()
        for item in batch:
            if isinstance(item, StreamWork):
                item.write(cur)
                continue
            if not isinstance(item, _Group):
                cur.execute(q[item[0]], item[1])
                continue
            if item.ins:
                needed = {mid for _, mid in item.ins}
                ids = [mid for mid in item.msgs if mid in needed]
                if ids:
                    cur.execute(q["put_messages"], (ids, [_encode_message(item.msgs[mid]) for mid in ids]))
                keys = list(item.ins)
                cur.execute(q["put_entries"], ([k[0] for k in keys], [k[1] for k in keys], list(item.ins.values())))
            if item.cnt:
                keys = list(item.cnt)
                cur.execute(q["set_counts"], ([k[0] for k in keys], [k[1] for k in keys], list(item.cnt.values())))
            if item.dels:
                keys = list(item.dels)
                cur.execute(q["delete_entries"], ([k[0] for k in keys], [k[1] for k in keys]))
                cur.execute(q["delete_orphans"], (list(item.touched),))

    def _retry_loop(self) -> None:
        """Reconnect and commit the pending batch every ``retry_interval`` until it works."""
        pause = threading.Event()
        while True:
            pause.wait(self.retry_interval)
            with self._sync_lock:
                if self._failed is None or self._closed:
                    self._retrying = False
                    return
            try:
                self._sync(retry=False)
            except StoreError:
                pass

    def close(self) -> None:
        """Commit what is pending, release the database."""
        if self._closed:
            return
        try:
            self.sync(0)
        except StoreError as exc:
            log.error("closing the store: %s", exc)
        with self._sync_lock:
            self._closed = True
            self._drop_connection()
        self._streams.close()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _safe_dsn(dsn: str) -> str:
    """The DSN without its password (for logs and errors)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable DSN>"
    # conninfo values are typed str | int; several hosts come as "h1,h2" with ports "p1,p2" (or one
    # port for all)
    hosts, ports = str(info.get("host", "")).split(","), str(info.get("port", "")).split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    where = ",".join(h + (":" + p if p else "") for h, p in zip(hosts, ports, strict=False))
    user, db = str(info.get("user", "")), info.get("dbname", "")
    return f"postgresql://{user + '@' if user else ''}{where}/{db}"
