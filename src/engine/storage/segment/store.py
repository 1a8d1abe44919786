"""``SegmentStore``: the embedded durable store (LavinMQ's design, see DESIGN.md section 3).

On disk, in one data directory::

    LOCK                  flock'd while a broker owns the directory
    journal               entity metadata + per-queue enqueue/remove/delivery-count/expiry records
    segments/00000001     append-only message records (one per persistent message, shared by queues)

Every record is ``<u32 length><u32 crc32(payload)><payload>``; replay stops at the first record whose
length or CRC is wrong (a torn tail) and the rest of that file is ignored. The journal is rewritten
from the live state on start and whenever it grows well past it (write tmp, fsync, rename, fsync
dir). A segment file is deleted once no queue refers to any message in it.

In memory each durable queue keeps two parallel ``array('Q')``: message ids (ascending: the model
allocates ids in enqueue order), packed positions ``segment << 32 | offset`` (0 = removed); a
sparse dict holds delivery counts of redelivered messages. An idle queue holds no arrays at all.

Writes only append to in-memory buffers on the loop thread (a large buffer is written out early);
``sync`` (a worker thread) writes the buffers with ``pwrite`` at known offsets under ``_lock``, then
fsyncs dup'd descriptors outside it, so the loop keeps appending during the fsync. A failed write
keeps the unwritten bytes buffered and is retried at the same offsets; until a retry succeeds new
messages are refused with ``StoreError`` (publishers get an error, removals/acks still go through).
Pages (the broker's ready messages beyond a queue's in-memory window, see ``Store.page_out``): one
u64 per message in ``_pages[(vhost, queue)]``. A persistent message of a durable queue is already a
record plus an index entry, so its slot is just its id; any other message is appended to the
current segment as a *transient* record (never journalled, so never recovered; fsynced only along
with durable data) and its slot is ``TRANSIENT | position``. ``page_in`` preads the records back in
order (also from the unwritten buffer) and drops the transient ones' segment references.
Recovery replays the journal straight into the index arrays and materialises only the first
``recover_window`` messages of each queue; the rest start in the queue's page, unread, so a restart
with a large backlog reads almost nothing from the segments. Materialised bodies beyond
``memory_bodies`` bytes stay on disk (``_LazyBodyMessage`` preads them on access). Unreferenced
segments are deleted by the next ``sync`` or segment rotation (transient-only traffic never syncs).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import Any
from zlib import crc32

from ..._message import Message
from ...store import BindingDef, ExchangeDef, PagedMessage, QueueDef, Recovered, Store, StoredMessage, StoreError
from ...streams._files import FileStreams
from ._index import TRANSIENT, _Page, _QIndex
from ._records import (
    _CNT,
    _ENQ,
    _EXP,
    _REC,
    _REM,
    JRN_MAGIC,
    K_CNT,
    K_ENQ,
    K_EXP,
    K_META,
    K_REM,
    OP_ADD_B,
    OP_ADD_Q,
    OP_ADD_VHOST,
    OP_ADD_X,
    OP_DEL_B,
    OP_DEL_DOC,
    OP_DEL_Q,
    OP_DEL_VHOST,
    OP_DEL_X,
    OP_PUT_DOC,
    SEG_MAGIC,
    _decode_message,
    _encode_message,
    _record,
    decode_meta,
    decode_plain_queue,
    encode_meta,
    meta_binding,
    meta_exchange,
    meta_queue,
    meta_to_def,
    meta_vhost,
    write_out,
)

__all__ = ["SegmentStore"]

log = logging.getLogger("sansmq.store")


#: buffered bytes that trigger a write-out on the loop thread without waiting for ``sync``
FLUSH_AT = 1 << 20
#: page-in reads records at most this far apart with one pread
READ_SPAN = 256 << 10
#: the journal is compacted when it is larger than this and than COMPACT_RATIO x the live state
COMPACT_MIN = 4 << 20
COMPACT_RATIO = 4


class _File:
    """An append-only file written at known offsets from a buffer (retried after a failed write)."""

    __slots__ = ("path", "fd", "written", "buf", "dirty")

    def __init__(self, path: str, fd: int, written: int) -> None:
        self.path = path
        self.fd = fd
        self.written = written
        self.buf = bytearray()
        self.dirty = False

    @property
    def size(self) -> int:
        return self.written + len(self.buf)


#: ``SegmentStore._qs`` value of an idle plain queue (a cached small int: costs nothing per queue)
_IDLE = 0


class _QueueDefs(Sequence[QueueDef]):
    """``Recovered.queues`` of a SegmentStore: the queues as loaded (vhost -> name -> index),
    each QueueDef made when it is read."""

    __slots__ = ("_qs",)

    def __init__(self, qs: dict[str, dict[str, int | _QIndex]]) -> None:
        self._qs = qs

    def __iter__(self) -> Iterator[QueueDef]:
        qdef = SegmentStore._qdef
        for vname, v in self._qs.items():
            for qname, x in v.items():
                yield qdef(vname, qname, x)

    def __len__(self) -> int:
        return sum(len(v) for v in self._qs.values())

    def __getitem__(self, i: Any) -> Any:  # not used by the broker: a list is fine here
        return list(self)[i]

    def __eq__(self, other: object) -> bool:
        return list(self) == other if isinstance(other, (list, _QueueDefs)) else NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


class SegmentStore(Store):
    """Durable store in directory ``path``. Opening loads everything (``recover()`` hands it over once).

    ``sync=False`` never fsyncs: ``sync`` then only hands the buffers to the OS, so confirmed data
    survives the process being killed but not a power loss or kernel crash."""

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = True, segment_size: int = 8 << 20,
                 memory_bodies: int = 64 << 20, recover_window: int = 2048) -> None:
        self.path = os.fspath(path)
        #: receipts always wait for ``sync``: with ``fsync`` off it is only a write to the OS
        self.needs_sync = True
        self.fsync = sync
        self.segment_size = segment_size
        self._lock = threading.Lock()  # buffers, file table, rotation
        self._sync_lock = threading.Lock()  # one sync at a time
        self._failed: str | None = None  # why the last write-out failed (new messages refused)
        self._vhosts: dict[str, None] = {}
        self._exchanges: dict[tuple[str, str], ExchangeDef] = {}
        #: (kind, key) -> JSON document (Store.put_doc)
        self._docs: dict[tuple[str, str], str] = {}
        #: vhost -> queue name -> its index. An idle plain queue (durable, no auto-delete, no
        #: arguments, no messages) is ``_IDLE`` and has no qid yet: its first message gives it one
        #: (a new ADD_Q record, which replaces the old one on replay) and a _QIndex
        self._qs: dict[str, dict[str, int | _QIndex]] = {}
        self._bindings: dict[tuple[Any, ...], BindingDef] = {}
        self._next_qid = 1
        self._refs: dict[int, int] = {}  # segment -> live (queue, message) references
        self._segs: dict[int, _File] = {}
        self._seg: _File | None = None
        self._seg_no = 0
        self._last_msg: tuple[int, int] = (0, 0)  # (message id, position) of the last written
        self._dir_dirty = False
        self._j: _File | None = None
        self._j_live_hint = 0
        self.dropped_on_recovery = 0  # referenced records that were missing or torn
        #: recovered bodies are loaded into memory up to this many bytes; the rest stay on disk
        self.memory_bodies = memory_bodies
        self._doomed: list[int] = []  # unreferenced segments, deleted by the next sync
        #: messages per queue materialised by recovery; the rest start in the queue's page
        self.recover_window = max(1, recover_window)
        #: (vhost, queue) -> its paged ready messages (durable or not)
        self._pages: dict[tuple[str, str], _Page] = {}
        #: paged records that could not be read back (torn, or a failed write that never recovered)
        self.dropped_paged = 0
        os.makedirs(os.path.join(self.path, "segments"), exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise StoreError(f"data directory {self.path} is in use by another process") from None
        self._recovered: Recovered | None = self._load()
        self._streams: FileStreams | None = None  # stream queues' logs, opened on first use

    # -- I/O primitives (fault-injection tests override these) -----------------------------------------
    def _pwrite(self, fd: int, data: bytearray, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def _fsync(self, fd: int) -> None:
        """Make an append-only file's new bytes durable: fdatasync flushes the data and the size
        (what reading them back needs) but not the timestamps, a journal commit cheaper."""
        os.fdatasync(fd)

    def _fsync_full(self, fd: int) -> None:
        """fsync with every bit of metadata: directories, the rewritten journal."""
        os.fsync(fd)

    # -- loading --------------------------------------------------------------------------------------
    def _seg_path(self, no: int) -> str:
        return os.path.join(self.path, "segments", f"{no:08d}")

    def _load(self) -> Recovered:
        """Replay the journal straight into the per-queue index arrays, then materialise the first
        ``recover_window`` messages of each queue; the rest stay in the queue's page, unread (a torn
        record among them is found and dropped when it is paged in)."""
        jpath = os.path.join(self.path, "journal")
        data: bytes | mmap.mmap = b""
        if os.path.exists(jpath) and os.path.getsize(jpath):
            with open(jpath, "rb") as f:  # mapped, not read: a big journal costs no heap
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        by_qid: dict[int, _QIndex] = {}
        #: loaded idle queues whose journal qid may still get messages: qid -> vhost, name (two
        #: dicts, no tuple per queue)
        self._idle_names: dict[int, str] = {}
        self._idle_vhosts: dict[int, str] = {}
        n_rec = 0  # records replayed
        torn = False
        magic = bytes(data[: len(JRN_MAGIC)])
        if magic == JRN_MAGIC:
            view = memoryview(data)
            off, end = len(JRN_MAGIC), len(data)
            rec_size = _REC.size
            while off + rec_size <= end:
                n, crc = _REC.unpack_from(view, off)
                stop = off + rec_size + n
                if stop > end or crc32(view[off + rec_size : stop]) != crc:
                    break
                p = view[off + rec_size : stop]
                off = stop
                n_rec += 1
                kind = p[0]
                if kind == K_ENQ:
                    _, qid, mid, pos = _ENQ.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is None and qid in self._idle_names:
                        qname = self._idle_names.pop(qid)
                        qi = by_qid[qid] = self._qs[self._idle_vhosts.pop(qid)][qname] = _QIndex(qid)
                    if qi is not None:
                        qi.add(mid, pos)
                elif kind == K_REM:
                    _, qid, mid = _REM.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None and (i := qi.find(mid)) >= 0:
                        qi.take(i)
                elif kind == K_CNT:
                    _, qid, mid, count = _CNT.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None and qi.find(mid) >= 0:
                        if qi.counts is None:
                            qi.counts = {}
                        qi.counts[mid] = count
                elif kind == K_EXP:
                    _, qid, mid, when = _EXP.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None and qi.find(mid) >= 0:
                        if qi.exp is None:
                            qi.exp = {}
                        qi.exp[mid] = when
                elif kind == K_META:
                    plain = decode_plain_queue(p)
                    if plain is not None:  # the common case, without a QueueDef
                        self._load_plain_queue(*plain, by_qid)
                        continue
                    try:
                        meta = decode_meta(bytes(p))
                    except (ValueError, IndexError, struct.error) as exc:
                        raise StoreError(f"{jpath}: malformed entity record ({exc})") from None
                    self._apply_meta(meta, by_qid)
            if off != end:
                torn = True
                log.warning("journal: dropped a torn tail of %d bytes", end - off)
            p = view = None  # type: ignore[assignment]  # release the mapping's exports
        elif magic.startswith(b"SMQJRN"):
            raise StoreError(f"{jpath} was written by another sansmq store format version "
                             f"({magic[:7].decode(errors='replace')}; this one reads {JRN_MAGIC[:7].decode()})")
        elif len(data):
            raise StoreError(f"{jpath} is not a sansmq journal")
        if isinstance(data, mmap.mmap):
            data.close()
        del data
        del self._idle_names, self._idle_vhosts
        for v in self._qs.values():  # the loaded idle queues drop their qids
            for qname, x in v.items():
                if type(x) is int:
                    v[qname] = _IDLE
        # segment references, and the files they keep
        refs = self._refs
        for qi in by_qid.values():
            if qi.pos is not None:
                for pos in qi.pos:
                    if pos:
                        refs[pos >> 32] = refs.get(pos >> 32, 0) + 1
        existing = [int(n) for n in os.listdir(os.path.join(self.path, "segments")) if n.isdigit()]
        for no in existing:
            if no in refs:
                self._segs[no] = _File(self._seg_path(no), os.open(self._seg_path(no), os.O_RDONLY), 0)
                self._segs[no].written = os.fstat(self._segs[no].fd).st_size
        # materialise each queue's head; a message shared by queues is decoded once
        decoded: dict[int, Message | None] = {}
        budget = self.memory_bodies
        rec = Recovered(list(self._vhosts), list(self._exchanges.values()), [], list(self._bindings.values()),
                        docs=dict(self._docs))
        max_id = 0
        for vname, qname, qi in self._all_queues():
            if type(qi) is int:
                continue
            if not qi.live:
                if qi.qdef is None:  # emptied plain queue: idle again (not at run time, where a queue
                    self._qs[vname][qname] = _IDLE  # emptied by every ack would journal an ADD_Q per message)
                continue
            key = (vname, qname)
            assert qi.ids is not None and qi.pos is not None
            max_id = max(max_id, qi.ids[-1])
            stored: list[StoredMessage] = []
            bad: list[int] = []
            i, n = 0, len(qi.ids)
            while i < n and len(stored) < self.recover_window:
                mid, pos = qi.ids[i], qi.pos[i]
                i += 1
                if not pos:
                    continue
                if pos in decoded:
                    msg = decoded[pos]
                else:
                    p = self._read_record(pos)
                    msg = None
                    if p is not None:
                        lazy = None
                        if budget < 0:
                            lazy = (self, pos + _REC.size)
                        else:
                            budget -= len(p)
                        try:
                            msg = _decode_message(p, lazy)
                        except (ValueError, IndexError, struct.error):
                            msg = None
                    decoded[pos] = msg
                if msg is None or msg.id != mid:
                    bad.append(mid)
                    continue
                stored.append(StoredMessage(msg, (qi.counts or {}).get(mid, 0), (qi.exp or {}).get(mid)))
            if stored:
                rec.messages[key] = stored
            if i < n:
                page = _Page()
                paged = 0
                tail = n - i
                if qi.live - len(stored) - len(bad) == tail and qi.ids[-1] - qi.ids[i] == tail - 1:
                    page.add_range(qi.ids[i], tail)  # no dead slots, consecutive ids: a few runs
                    paged = tail
                else:
                    for m, q in zip(qi.ids[i:], qi.pos[i:], strict=False):
                        if q:
                            page.add_stored(m)
                            paged += 1
                if paged:
                    self._pages[key] = page
                    rec.paged[key] = paged
            for mid in bad:  # never confirmed: forget them (the journal is rewritten below)
                self.dropped_on_recovery += 1
                pos = qi.take(qi.find(mid))
                left = refs[pos >> 32] - 1
                if left:
                    refs[pos >> 32] = left
                else:
                    del refs[pos >> 32]
        rec.max_message_id = max_id
        # the queues' definitions are made as they are read: a million idle queues need not be a
        # million QueueDefs at once (a copy of the dicts is a few big blocks, given back when freed)
        rec.queues = _QueueDefs({vname: dict(v) for vname, v in self._qs.items()})  # type: ignore[assignment]
        if self.dropped_on_recovery:
            log.warning("recovery: %d message records missing or torn (never confirmed)", self.dropped_on_recovery)
        # unreferenced segments go; new messages go to a fresh segment (old tails are never appended to)
        for no in existing:
            if no not in refs:
                self._drop_segment(no)
                try:
                    os.unlink(self._seg_path(no))
                except FileNotFoundError:
                    pass
        self._seg_no = max(existing, default=0)
        live = (sum(qi.live + len(qi.counts or ()) + len(qi.exp or ()) for qi in by_qid.values())
                + len(self._vhosts) + len(self._exchanges) + self._queue_count() + len(self._bindings)
                + len(self._docs))
        with self._lock:
            self._new_segment()
            if torn or self.dropped_on_recovery or not magic or n_rec > 2 * live + 64:
                self._compact()  # rewrite the live state (also cuts a torn tail)
            else:  # already compact enough: append to it as it is
                fd = os.open(jpath, os.O_RDWR)
                self._j = _File(jpath, fd, os.fstat(fd).st_size)
                self._j_live_hint = max(1024, live)
        return rec

    def _apply_meta(self, meta: tuple[int, list[str], int, int, Any], by_qid: dict[int, _QIndex]) -> None:
        op, strs, flags, qid, args = meta
        if op == OP_ADD_VHOST:
            self._vhosts[strs[0]] = None
        elif op == OP_PUT_DOC:
            self._docs.pop((strs[0], strs[1]), None)
            self._docs[(strs[0], strs[1])] = strs[2]
        elif op == OP_DEL_DOC:
            self._docs.pop((strs[0], strs[1]), None)
        elif op == OP_DEL_VHOST:
            self._vhosts.pop(strs[0], None)
        elif op == OP_ADD_X:
            self._exchanges[(strs[0], strs[1])] = meta_to_def(op, strs, flags, args)
        elif op == OP_DEL_X:
            self._forget_exchange(strs[0], strs[1])
        elif op == OP_ADD_Q:
            qdef = meta_to_def(op, strs, flags, args)
            self._forget_loaded(qdef.vhost, qdef.name, by_qid, True)
            x = self._put_queue(qid, qdef)
            if type(x) is int and qid:  # idle, but records may refer to its qid: keep it until loaded
                self._qs[qdef.vhost][qdef.name] = qid
                self._idle_names[qid] = qdef.name
                self._idle_vhosts[qid] = qdef.vhost
            elif type(x) is _QIndex:
                by_qid[qid] = x
            self._next_qid = max(self._next_qid, qid + 1)
        elif op == OP_DEL_Q:
            self._forget_loaded(strs[0], strs[1], by_qid)
            self._forget_queue_bindings(strs[0], strs[1])
        elif op == OP_ADD_B:
            b = meta_to_def(op, strs, flags, args)
            self._bindings[b.ident()] = b
        elif op == OP_DEL_B:
            self._bindings.pop(meta_to_def(op, strs, flags, args).ident(), None)

    def _load_plain_queue(self, vhost: str, name: str, qid: int, by_qid: dict[int, _QIndex]) -> None:
        """OP_ADD_Q of a plain queue while loading (as _apply_meta, faster)."""
        v = self._qs.get(vhost)
        if v is None:
            v = self._qs[vhost] = {}
        elif name in v:
            self._forget_loaded(vhost, name, by_qid, True)
        v[name] = qid  # 0 (_IDLE) when written without one
        if qid:
            self._idle_names[qid] = name
            self._idle_vhosts[qid] = vhost
            if qid >= self._next_qid:
                self._next_qid = qid + 1

    def _forget_loaded(self, vhost: str, name: str, by_qid: dict[int, _QIndex], keep_place: bool = False) -> None:
        """Drop a loaded queue (``keep_place``: an ADD_Q replaces it, in its place in creation order)."""
        v = self._qs.get(vhost)
        x = (v.get(name) if keep_place else v.pop(name, None)) if v is not None else None
        if type(x) is _QIndex:
            by_qid.pop(x.qid, None)
        elif x:  # idle with a qid (while loading, see _apply_meta)
            self._idle_names.pop(x, None)  # type: ignore[call-overload]
            self._idle_vhosts.pop(x, None)  # type: ignore[call-overload]

    # -- per-queue state ----------------------------------------------------------------------------------
    def _put_queue(self, qid: int, qdef: QueueDef) -> int | _QIndex:
        v = self._qs.get(qdef.vhost)
        if v is None:
            v = self._qs[qdef.vhost] = {}
        plain = qdef.durable and not qdef.auto_delete and not qdef.args
        x = v[qdef.name] = _IDLE if plain else _QIndex(qid, qdef)
        return x

    def _qget(self, vhost: str, name: str) -> _QIndex | None:
        """The index of a queue holding (or having held) messages; None for unknown and idle ones."""
        v = self._qs.get(vhost)
        x = v.get(name) if v is not None else None
        return None if x is None or type(x) is int else x  # type: ignore[return-value]

    def _upgrade(self, v: dict[str, int | _QIndex], vhost: str, name: str) -> _QIndex:
        """An idle plain queue's first message: a qid and a _QIndex (journalled as a new ADD_Q)."""
        qid = self._next_qid
        self._next_qid += 1
        qi = v[name] = _QIndex(qid)
        self._meta(meta_queue(qid, QueueDef(vhost, name)))
        return qi

    @staticmethod
    def _qdef(vhost: str, name: str, x: int | _QIndex) -> QueueDef:
        if type(x) is int or x.qdef is None:  # type: ignore[union-attr]
            return QueueDef(vhost, name)
        return x.qdef  # type: ignore[union-attr,return-value]

    def _all_queues(self) -> Iterator[tuple[str, str, int | _QIndex]]:
        for vname, v in self._qs.items():
            for qname, x in v.items():
                yield vname, qname, x

    def _indexes(self) -> Iterator[_QIndex]:
        for v in self._qs.values():
            for x in v.values():
                if type(x) is not int:
                    yield x  # type: ignore[misc]

    def _queue_count(self) -> int:
        return sum(len(v) for v in self._qs.values())

    def _forget_exchange(self, vhost: str, name: str) -> None:
        self._exchanges.pop((vhost, name), None)
        for ident, b in list(self._bindings.items()):
            if b.vhost == vhost and (b.source == name or (b.dest_is_exchange and b.dest == name)):
                del self._bindings[ident]

    def _forget_queue_bindings(self, vhost: str, name: str) -> None:
        for ident, b in list(self._bindings.items()):
            if b.vhost == vhost and not b.dest_is_exchange and b.dest == name:
                del self._bindings[ident]

    def recover(self) -> Recovered:
        rec, self._recovered = self._recovered, None
        if rec is None:  # asked again: rebuild from the live state (bodies are not kept)
            raise StoreError("SegmentStore.recover() hands its state over once; reopen the store")
        return rec

    # -- appending (loop thread) ----------------------------------------------------------------------------
    def _new_segment(self) -> None:
        """Start the next segment file (caller holds ``_lock``)."""
        self._seg_no += 1
        path = self._seg_path(self._seg_no)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg = _File(path, fd, 0)
        seg.buf += SEG_MAGIC
        self._segs[self._seg_no] = seg
        self._seg = seg
        self._dir_dirty = True

    def _append(self, f: _File, rec: bytes) -> None:
        f.buf += rec
        if len(f.buf) >= FLUSH_AT and self._failed is None:
            try:
                self._write_file(f)
            except OSError as exc:
                self._mark_failed(exc)

    def _journal(self, payload: bytes) -> None:
        assert self._j is not None
        with self._lock:
            self._append(self._j, _record(payload))

    def _meta(self, payload: bytes) -> None:
        self._journal(payload)

    def _mark_failed(self, exc: OSError) -> None:
        if self._failed is None:
            log.error("store write failed, refusing new messages until a retry succeeds: %s", exc)
        self._failed = f"{errno.errorcode.get(exc.errno or 0, 'EIO')}: {exc.strerror or exc}"

    def _check_writable(self) -> None:
        """New data is refused while a write-out is failing (a retry here may clear the failure)."""
        if self._failed is None:
            return
        with self._lock:
            try:
                self._write_all()
            except OSError as exc:
                self._mark_failed(exc)
                raise StoreError(f"message store cannot write ({self._failed})") from None
            log.warning("store writes work again")
            self._failed = None

    def add_vhost(self, name: str) -> None:
        self._check_writable()
        self._vhosts[name] = None
        self._meta(meta_vhost(OP_ADD_VHOST, name))

    def delete_vhost(self, name: str) -> None:
        self._vhosts.pop(name, None)
        self._meta(meta_vhost(OP_DEL_VHOST, name))

    def put_doc(self, kind: str, key: str, doc: str) -> None:
        self._check_writable()
        self._docs.pop((kind, key), None)
        self._docs[(kind, key)] = doc
        self._meta(encode_meta(OP_PUT_DOC, kind, key, doc))

    def delete_doc(self, kind: str, key: str) -> None:
        if self._docs.pop((kind, key), None) is not None:
            self._meta(encode_meta(OP_DEL_DOC, kind, key))

    def add_exchange(self, xdef: ExchangeDef) -> None:
        self._check_writable()
        self._exchanges[(xdef.vhost, xdef.name)] = xdef
        self._meta(meta_exchange(xdef))

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._forget_exchange(vhost, name)
        self._meta(encode_meta(OP_DEL_X, vhost, name))

    def add_queue(self, qdef: QueueDef) -> None:
        self._check_writable()
        v = self._qs.get(qdef.vhost)
        if v is not None and qdef.name in v:
            self.delete_queue(qdef.vhost, qdef.name)
        x = self._put_queue(self._next_qid, qdef)
        qid = 0
        if type(x) is _QIndex:
            qid = x.qid
            self._next_qid += 1
        self._meta(meta_queue(qid, qdef))

    def delete_queue(self, vhost: str, name: str) -> None:
        self.page_drop(vhost, name, False)
        self.delete_stream(vhost, name)
        v = self._qs.get(vhost)
        qi = v.pop(name, None) if v is not None else None
        if v is not None and not v:
            del self._qs[vhost]
        if qi is not None and type(qi) is not int:
            for _, pos in qi.entries():  # type: ignore[union-attr]
                self._unref(pos >> 32)
        self._forget_queue_bindings(vhost, name)
        self._meta(encode_meta(OP_DEL_Q, vhost, name))

    def add_binding(self, bdef: BindingDef) -> None:
        self._check_writable()
        self._bindings[bdef.ident()] = bdef
        self._meta(meta_binding(OP_ADD_B, bdef))

    def delete_binding(self, bdef: BindingDef) -> None:
        self._bindings.pop(bdef.ident(), None)
        self._meta(meta_binding(OP_DEL_B, bdef))

    def enqueue(self, vhost: str, queue: str, msg: Message) -> None:
        v = self._qs.get(vhost)
        qi = v.get(queue) if v is not None else None
        if qi is None:
            return  # not a durable queue this store knows of
        self._check_writable()
        if type(qi) is int:
            qi = self._upgrade(v, vhost, queue)  # type: ignore[arg-type]
        with self._lock:
            pos = self._append_message(msg)
            assert self._j is not None
            self._append(self._j, _record(_ENQ.pack(K_ENQ, qi.qid, msg.id, pos)))
        qi.add(msg.id, pos)
        seg_no = pos >> 32
        self._refs[seg_no] = self._refs.get(seg_no, 0) + 1

    def enqueue_expiring(self, vhost: str, queue: str, msg: Message, expires: float) -> None:
        self.enqueue(vhost, queue, msg)
        qi = self._qget(vhost, queue)
        if qi is None or qi.find(msg.id) < 0:
            return
        if qi.exp is None:
            qi.exp = {}
        qi.exp[msg.id] = expires
        self._journal(_EXP.pack(K_EXP, qi.qid, msg.id, expires))

    def _append_message(self, msg: Message) -> int:
        """Append ``msg``'s record to the current segment (caller holds ``_lock``); the same message
        routed to several queues (or pages) right after another shares one record."""
        if self._last_msg[0] == msg.id:
            return self._last_msg[1]
        rec = _record(_encode_message(msg))
        seg = self._seg
        assert seg is not None
        if seg.size + len(rec) > self.segment_size and seg.size > len(SEG_MAGIC):
            self._rotate()
            seg = self._seg
            assert seg is not None
        pos = (self._seg_no << 32) | seg.size
        self._append(seg, rec)
        self._last_msg = (msg.id, pos)
        return pos

    # -- paging (loop thread) --------------------------------------------------------------------------
    def page_out(self, vhost: str, queue: str, msg: Message, count: int, expires: float | None,
                 stored: bool) -> None:
        key = (vhost, queue)
        page = self._pages.get(key)
        if page is None:
            page = self._pages[key] = _Page()
        if stored:
            qi = self._qget(*key)
            if qi is not None and qi.find(msg.id) >= 0:  # already a record + index entry: just its id
                page.add_stored(msg.id)
                return
        # a transient record: never journalled, so never recovered; fsynced only along with others
        with self._lock:
            pos = self._append_message(msg)
        self._refs[pos >> 32] = self._refs.get(pos >> 32, 0) + 1
        slot = page.add_transient(pos)
        if count or expires != msg.expires_at:
            if page.extra is None:
                page.extra = {}
            page.extra[slot] = (count, expires)

    def _page_read(self, key: tuple[str, str], page: _Page, slot: int, e: int, take: bool) -> PagedMessage | None:
        """Page item ``e`` (at absolute ``slot``) read back; ``take``: it leaves the page (a transient
        record loses its reference; an unreadable stored one is removed from the queue for good)."""
        if e & TRANSIENT:
            pos = e & ~TRANSIENT
            extra = page.extra.get(slot) if page.extra else None
            msg = self._read_message(pos)
            if take:
                if extra is not None:
                    del page.extra[slot]  # type: ignore[union-attr]
                self._unref(pos >> 32)
            if msg is None:
                return None
            count, expires = extra if extra is not None else (0, msg.expires_at)
            return msg, count, expires
        qi = self._qget(*key)
        i = qi.find(e) if qi is not None else -1
        if i < 0:
            return None
        assert qi is not None and qi.pos is not None
        msg = self._read_message(qi.pos[i])
        if msg is None or msg.id != e:
            if take:
                self.remove(key[0], key[1], e)
            return None
        return msg, (qi.counts or {}).get(e, 0), (qi.exp or {}).get(e, msg.expires_at)

    def page_in(self, vhost: str, queue: str, n: int) -> tuple[list[PagedMessage], int]:
        key = (vhost, queue)
        page = self._pages.get(key)
        if page is None:
            return [], 0
        out: list[PagedMessage] = []
        items = page.items(n, True)
        qi = self._qget(*key)
        positions = []
        for _, e in items:
            if e & TRANSIENT:
                positions.append(e & ~TRANSIENT)
            else:
                i = qi.find(e) if qi is not None else -1
                positions.append(qi.pos[i] if i >= 0 else 0)  # type: ignore[union-attr,index]
        payloads = self._read_records(positions)  # one pread per run of nearby records
        extra = page.extra
        for (slot, e), pos, p in zip(items, positions, payloads, strict=False):
            msg = None
            if p is not None:
                try:
                    msg = _decode_message(p)
                except (ValueError, IndexError, struct.error):
                    msg = None
            if e & TRANSIENT:
                more = extra.pop(slot, None) if extra else None
                self._unref(pos >> 32)  # the message lives in memory from now on
                if msg is None:
                    self.dropped_paged += 1
                    continue
                count, expires = more if more is not None else (0, msg.expires_at)
                out.append((msg, count, expires))
            elif pos:
                if msg is None or msg.id != e:
                    self.dropped_paged += 1
                    self.remove(vhost, queue, e)  # unreadable: gone for good
                    continue
                assert qi is not None
                out.append((msg, (qi.counts or {}).get(e, 0), (qi.exp or {}).get(e, msg.expires_at)))
        if extra is not None and not extra:
            page.extra = None
        if not len(page):
            del self._pages[key]
        if len(out) < len(items):
            log.warning("queue %r: %d paged message(s) could not be read back", queue, len(items) - len(out))
        return out, len(items)

    def page_drop(self, vhost: str, queue: str, forget_stored: bool) -> None:
        page = self._pages.pop((vhost, queue), None)
        if page is None:
            return
        while items := page.items(1 << 16, True):
            for _, e in items:
                if e & TRANSIENT:
                    self._unref((e & ~TRANSIENT) >> 32)
                elif forget_stored:
                    self.remove(vhost, queue, e)

    def paged(self, vhost: str, queue: str) -> list[PagedMessage]:
        key = (vhost, queue)
        page = self._pages.get(key)
        if page is None:
            return []
        out = []
        for slot, e in page.items(1 << 62, False):
            got = self._page_read(key, page, slot, e, False)
            if got is not None:
                out.append(got)
        return out

    def _read_at(self, f: _File, off: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``off`` of ``f``, from the file and/or its unwritten buffer (caller
        holds ``_lock``)."""
        w = f.written
        if off + n <= w:
            return os.pread(f.fd, n, off)
        if off >= w:
            return bytes(f.buf[off - w : off - w + n])
        return os.pread(f.fd, w - off, off) + bytes(f.buf[: off + n - w])

    def _read_record(self, pos: int) -> bytes | None:
        """The payload of the record at ``pos`` if it is complete and its CRC matches."""
        return self._read_records([pos])[0]

    def _read_records(self, positions: list[int]) -> list[bytes | None]:
        """Payloads of the records at ``positions`` (None: missing, torn or CRC mismatch). Runs of
        ascending positions less than ``READ_SPAN`` apart in one segment are read with one pread."""
        out: list[bytes | None] = [None] * len(positions)
        rec_size = _REC.size
        i, total = 0, len(positions)
        with self._lock:
            while i < total:
                pos = positions[i]
                f = self._segs.get(pos >> 32) if pos else None
                if f is None:
                    i += 1
                    continue
                seg, start = pos >> 32, pos & 0xFFFFFFFF
                j, last = i + 1, start
                while j < total:
                    nxt = positions[j]
                    off = nxt & 0xFFFFFFFF
                    if nxt >> 32 != seg or off < last or off - start > READ_SPAN:
                        break
                    last = off
                    j += 1
                block = self._read_at(f, start, last - start + 512)
                for k in range(i, j):
                    o = (positions[k] & 0xFFFFFFFF) - start
                    if o + rec_size > len(block):
                        head = self._read_at(f, start + o, rec_size)
                        if len(head) < rec_size:
                            continue
                        n, crc = _REC.unpack_from(head, 0)
                        payload = self._read_at(f, start + o + rec_size, n)
                    else:
                        n, crc = _REC.unpack_from(block, o)
                        payload = block[o + rec_size : o + rec_size + n]
                        if len(payload) < n:  # a record longer than the block holds
                            payload = self._read_at(f, start + o + rec_size, n)
                    if len(payload) == n and crc32(payload) == crc:
                        out[k] = payload
                i = j
        return out

    def _read_message(self, pos: int) -> Message | None:
        p = self._read_record(pos)
        if p is None:
            return None
        try:
            return _decode_message(p)
        except (ValueError, IndexError, struct.error):
            return None

    def _rotate(self) -> None:
        """Write the full segment out (its fsync is left to the next sync) and start a new one."""
        assert self._seg is not None
        try:
            self._write_file(self._seg)
        except OSError as exc:
            self._mark_failed(exc)
            raise StoreError(f"message store cannot write ({self._failed})") from None
        old = self._seg_no
        self._new_segment()
        if old not in self._refs:  # everything in it already left its queues
            self._doomed.append(old)
        # unreferenced segments also go here, not only at sync: transient-only traffic never syncs
        doomed, self._doomed = self._doomed, []
        for no in doomed:
            if no not in self._refs and no != self._seg_no:
                self._drop_segment(no)

    def remove(self, vhost: str, queue: str, msg_id: int) -> None:
        qi = self._qget(vhost, queue)
        if qi is None:
            return
        i = qi.find(msg_id)
        if i < 0:
            return
        pos = qi.take(i)
        self._journal(_REM.pack(K_REM, qi.qid, msg_id))
        self._unref(pos >> 32)
        self._j_live_hint -= 1
        if self._j_live_hint <= 0:
            self._maybe_compact()

    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        qi = self._qget(vhost, queue)
        if qi is None or qi.find(msg_id) < 0:
            return
        if qi.counts is None:
            qi.counts = {}
        qi.counts[msg_id] = delivery_count
        self._journal(_CNT.pack(K_CNT, qi.qid, msg_id, delivery_count))

    def _unref(self, seg_no: int) -> None:
        n = self._refs.get(seg_no, 0) - 1
        if n > 0:
            self._refs[seg_no] = n
            return
        self._refs.pop(seg_no, None)
        if seg_no == self._seg_no:
            return  # still being appended to (dropped at rotation if still unreferenced)
        # deleted by the next sync, off the loop thread; a body read right after the last
        # removal (dead-lettering) still finds the file
        with self._lock:
            self._doomed.append(seg_no)

    def _read_body(self, at: int, n: int) -> bytes:
        f = self._segs.get(at >> 32)
        if f is None:
            raise StoreError("message body no longer stored (its segment was deleted)")
        data = os.pread(f.fd, n, at & 0xFFFFFFFF)
        if len(data) != n:
            raise StoreError("message body truncated in its segment")
        return data

    def _drop_segment(self, seg_no: int) -> None:
        """Close and delete a segment nothing refers to (caller holds ``_lock``)."""
        f = self._segs.pop(seg_no, None)
        if f is not None:
            os.close(f.fd)
            try:
                os.unlink(f.path)
            except FileNotFoundError:
                pass

    # -- write-out and sync ----------------------------------------------------------------------------------
    def _write_file(self, f: _File) -> None:
        """pwrite the buffer at its offset (caller holds _lock)."""
        write_out(f, self._pwrite)

    def _write_all(self) -> None:
        for f in list(self._segs.values()):
            self._write_file(f)
        if self._j is not None:
            self._write_file(self._j)

    # -- stream queues (engine.streams._files: one directory of segment files per stream) -----------
    def _stream_logs(self) -> FileStreams:
        if self._streams is None:
            self._streams = FileStreams(self.path, fsync=self.fsync)
        return self._streams

    def sync(self, token: int) -> None:
        """Make durable everything appended so far (a superset of what ``Sync(token)`` covers)."""
        if self._streams is not None:
            self._streams.sync()
        with self._sync_lock:
            with self._lock:
                try:
                    self._write_all()
                except OSError as exc:
                    self._mark_failed(exc)
                    raise StoreError(f"message store cannot write ({self._failed})") from None
                self._failed = None
                doomed, self._doomed = self._doomed, []
                for no in doomed:
                    if no not in self._refs and no != self._seg_no:
                        self._drop_segment(no)
                if not self.fsync:
                    return
                files = [f for f in self._segs.values() if f.dirty]
                if self._j is not None and self._j.dirty:
                    files.append(self._j)
                fds = []
                for f in files:
                    f.dirty = False
                    fds.append(os.dup(f.fd))
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for fd in fds:
                    self._fsync(fd)
                if dir_dirty:
                    self._fsync_dir(os.path.join(self.path, "segments"))
            except OSError as exc:
                # after a failed fsync the kernel may have dropped the pages: never report success
                # for them; the files are marked dirty again so the next sync fsyncs them again
                with self._lock:
                    for f in files:
                        f.dirty = True
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    self._mark_failed(exc)
                raise StoreError(f"message store cannot sync ({self._failed})") from None
            finally:
                for fd in fds:
                    os.close(fd)

    def _fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._fsync_full(fd)
        finally:
            os.close(fd)

    # -- journal compaction ---------------------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        live = sum(qi.live for qi in self._indexes()) + len(self._bindings) + self._queue_count()
        assert self._j is not None
        limit = max(COMPACT_MIN, COMPACT_RATIO * 32 * live)
        if self._j.size > limit and self._failed is None:
            with self._lock:
                try:
                    self._compact()
                except OSError as exc:
                    log.error("journal compaction failed: %s", exc)
        self._j_live_hint = max(1024, live)

    def _compact(self) -> None:
        """Rewrite the journal as the live state (caller holds ``_lock``). Segment data it refers to
        is written out first; its fsync is left to the next sync, as for any append."""
        for f in self._segs.values():
            self._write_file(f)
        tmp = os.path.join(self.path, "journal.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        out = bytearray(JRN_MAGIC)
        done = 0

        def flush() -> None:  # written in chunks: a big journal is never one buffer in memory
            nonlocal done
            while out:
                n = self._pwrite(fd, out, done)
                done += n
                del out[:n]

        try:
            for v in self._vhosts:
                out += _record(meta_vhost(OP_ADD_VHOST, v))
            for (kind, key), doc in self._docs.items():
                out += _record(encode_meta(OP_PUT_DOC, kind, key, doc))
            for x in self._exchanges.values():
                out += _record(meta_exchange(x))
            for vname, qname, x in self._all_queues():
                out += _record(meta_queue(0 if type(x) is int else x.qid, self._qdef(vname, qname, x)))  # type: ignore[union-attr,arg-type]
                if len(out) >= FLUSH_AT:
                    flush()
            for b in self._bindings.values():
                out += _record(meta_binding(OP_ADD_B, b))
                if len(out) >= FLUSH_AT:
                    flush()
            for qi in self._indexes():
                for mid, pos in qi.entries():
                    out += _record(_ENQ.pack(K_ENQ, qi.qid, mid, pos))
                    if len(out) >= FLUSH_AT:
                        flush()
                for mid, count in (qi.counts or {}).items():
                    out += _record(_CNT.pack(K_CNT, qi.qid, mid, count))
                for mid, when in (qi.exp or {}).items():
                    out += _record(_EXP.pack(K_EXP, qi.qid, mid, when))
                if len(out) >= FLUSH_AT:
                    flush()
            flush()
            self._fsync_full(fd)
        except BaseException:
            os.close(fd)
            raise
        os.replace(tmp, os.path.join(self.path, "journal"))
        self._fsync_dir(self.path)
        if self._j is not None:
            os.close(self._j.fd)
        self._j = _File(os.path.join(self.path, "journal"), fd, done)

    def close(self) -> None:
        """Write out and fsync everything (when syncing), release the directory."""
        if self._lock_fd < 0:
            return
        try:
            self.sync(0)
        except (StoreError, OSError) as exc:
            log.error("closing the store: %s", exc)
        if self._streams is not None:
            self._streams.close()
        with self._lock:
            for f in self._segs.values():
                os.close(f.fd)
            self._segs.clear()
            if self._j is not None:
                os.close(self._j.fd)
                self._j = None
            os.close(self._lock_fd)
            self._lock_fd = -1

