"""``SegmentStore``: the embedded durable store (LavinMQ's design, see DESIGN.md section 3).

On disk, in one data directory::

    LOCK                  flock'd while a broker owns the directory
    journal               entity metadata + per-queue enqueue/remove/delivery-count/expiry records
    segments/00000001     append-only message records (one per persistent message, shared by queues),
                          each followed by its enqueue record(s), then zeros written ahead

Every record is ``<u32 length><u32 crc32(payload)><payload>``; replay stops at the first record whose
length or CRC is wrong (a torn tail) or whose length is 0 (a zeroed tail) and the rest of that file
is ignored. A receipt waits for one fdatasync: the segment's. Its enqueue record is in the segment
beside the message (and in the journal, fsynced later); recovery applies the segment's enqueue
records the journal does not cover yet (``_recovery``). The journal is rewritten
from the live state on start and whenever it grows well past it (write tmp, fsync, rename, fsync
dir). A segment file is deleted once no queue refers to any message in it.

In memory each durable queue keeps message ids (ascending: the model allocates ids in enqueue
order) and packed positions ``segment << 32 | offset`` (0 = removed) in blocks of 4096, all but
the open one and a few in use packed to a few bytes (``_blocks``); a sparse dict holds delivery counts of
redelivered messages. An idle queue holds no arrays at all.

Writes only append to in-memory buffers on the loop thread (a large buffer is written out early);
``sync`` (a worker thread) writes the buffers with ``pwrite`` at known offsets under ``_lock``, then
fsyncs the files outside it, so the loop keeps appending during the fsync (a descriptor closed
meanwhile is closed after the fsync). A failed write
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

This module holds the store's state, appends and sync; its other jobs are mixins in their own
modules: ``_recovery`` (loading), ``_paging`` (page out/in and record reads), ``_compaction``
(rewriting the journal); ``_files`` and ``_queuedefs`` hold the small types they share.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from ..._message import Message
from ...fs import OS_FS, FileSystem
from ...records import _encode_message, _record, rewrite_unsynced, write_out
from ...store import BindingDef, ExchangeDef, QueueDef, Recovered, Store, StoreError
from ...streams._directory import FileStreams
from ._compaction import Compaction
from ._files import FLUSH_AT, _File, zero_ahead
from ._index import _Page, _QIndex
from ._paging import Paging
from ._queuedefs import _IDLE, queue_def
from ._records import (
    _CNT,
    _ENQ,
    _EXP,
    _REM,
    K_CNT,
    K_ENQ,
    K_EXP,
    K_REM,
    OP_ADD_B,
    OP_ADD_VHOST,
    OP_DEL_B,
    OP_DEL_DOC,
    OP_DEL_Q,
    OP_DEL_VHOST,
    OP_DEL_X,
    OP_PUT_DOC,
    SEG_MAGIC,
    encode_meta,
    meta_binding,
    meta_exchange,
    meta_queue,
    meta_vhost,
)
from ._recovery import Recovery

__all__ = ["SegmentStore"]

#: a sync that has segment data to fsync leaves the journal's ride-along records (removals, delivery
#: counts) unsynced at most this many times in a row (they are written to the OS every sync, so only
#: a power loss or kernel crash can lose them: a redelivery, never a lost message)
JOURNAL_LAZY_SYNCS = 64

log = logging.getLogger("sansmq.store")


class SegmentStore(Recovery, Paging, Compaction, Store):
    """Durable store in directory ``path``. Opening loads everything (``recover()`` hands it over once).

    ``sync=False`` never fsyncs: ``sync`` then only hands the buffers to the OS, so confirmed data
    survives the process being killed but not a power loss or kernel crash. ``fs`` is the file
    system every file call goes through (``engine.simfs.SimFS`` under the simulator)."""

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = True, segment_size: int = 8 << 20,
                 memory_bodies: int = 64 << 20, recover_window: int = 2048, fs: FileSystem = OS_FS) -> None:
        self.path = os.fspath(path)
        self._fs = fs
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
        #: segments before the current one that were written since their last fsync: a sync
        #: visits these and the current segment, never every segment of a large backlog
        self._rotated: dict[int, _File] = {}
        self._seg: _File | None = None
        self._seg_no = 0
        self._last_msg: tuple[int, int] = (0, 0)  # (message id, position) of the last written
        self._dir_dirty = False
        self._j: _File | None = None
        self._j_live_hint = 0
        #: the journal holds a record some sync must make durable (a definition, an expiry); its
        #: enqueues are durable with their segment (see ``enqueue``), removals and delivery counts ride
        #: along with a later journal fsync (a lost one only means a redelivery)
        self._j_must = False
        self._j_lazy_syncs = 0  # syncs since the journal's last fsync while it had unsynced records
        #: a sync is fsyncing outside ``_lock``: descriptors closed meanwhile wait in ``_closing``
        #: (so the fsync never needs a dup'd descriptor)
        self._fsyncing = False
        self._closing: list[int] = []
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
        fs.makedirs(os.path.join(self.path, "segments"), exist_ok=True)
        try:
            self._lock_fd = fs.lock(os.path.join(self.path, "LOCK"))
        except OSError:
            raise StoreError(f"data directory {self.path} is in use by another process") from None
        try:
            self._recovered: Recovered | None = self._load()
        except OSError as exc:  # e.g. the disk is full: the journal cannot be rewritten
            fs.close(self._lock_fd)
            raise StoreError(f"cannot open the data directory {self.path}: {exc.strerror or exc}") from None
        self._streams: FileStreams | None = None  # stream queues' logs, opened on first use

    # -- I/O primitives (through the file-system seam; fault-injection tests also override these)
    def _pwrite(self, fd: int, data: bytearray | memoryview, offset: int) -> int:
        return self._fs.pwrite(fd, data, offset)

    def _fsync(self, fd: int) -> None:
        """Make an append-only file's new bytes durable: fdatasync flushes the data and the size
        (what reading them back needs) but not the timestamps, a journal commit cheaper."""
        self._fs.fdatasync(fd)

    def _fsync_full(self, fd: int) -> None:
        """fsync with every bit of metadata: directories, the rewritten journal."""
        self._fs.fsync(fd)

    def _seg_path(self, no: int) -> str:
        return os.path.join(self.path, "segments", f"{no:08d}")


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

    _qdef = staticmethod(queue_def)

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
        fd = self._fs.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
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
        self._j_must = True

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
            for pos in qi.positions():  # type: ignore[union-attr]
                self._unref(pos >> 32)
            qi.clear()  # type: ignore[union-attr]
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
        if isinstance(qi, int):
            assert v is not None
            qi = self._upgrade(v, vhost, queue)
        with self._lock:
            pos = self._append_message(msg)
            enq = _record(_ENQ.pack(K_ENQ, qi.qid, msg.id, pos))
            assert self._j is not None and self._seg is not None
            self._append(self._j, enq)
            if pos >> 32 == self._seg_no:
                # the enqueue beside its message: the segment's fsync alone makes both durable
                # (recovery applies the markers the journal does not hold yet, see _recovery)
                self._append(self._seg, enq)
            else:  # not expected (a shared record is always in the current segment)
                self._j_must = True
        qi.add(msg.id, pos)
        seg_no = pos >> 32
        self._refs[seg_no] = self._refs.get(seg_no, 0) + 1

    def enqueue_expiring(self, vhost: str, queue: str, msg: Message, expires: float) -> None:
        self.enqueue(vhost, queue, msg)
        qi = self._qget(vhost, queue)
        if qi is None or msg.id not in qi:
            return
        if qi.exp is None:
            qi.exp = {}
        qi.exp[msg.id] = expires
        exp = _EXP.pack(K_EXP, qi.qid, msg.id, expires)
        self._journal(exp)
        self._j_must = True
        if self._last_msg[0] == msg.id and self._last_msg[1] >> 32 == self._seg_no:
            # beside the enqueue marker too: a message recovered from its marker keeps its TTL
            assert self._seg is not None
            with self._lock:
                self._append(self._seg, _record(exp))

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

    def _rotate(self) -> None:
        """Write the full segment out (its fsync is left to the next sync) and start a new one."""
        assert self._seg is not None
        try:
            self._write_file(self._seg)
        except OSError as exc:
            self._mark_failed(exc)
            raise StoreError(f"message store cannot write ({self._failed})") from None
        old = self._seg_no
        self._rotated[old] = self._seg
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
        pos = qi.pop(msg_id)
        if not pos:
            return
        self._journal(_REM.pack(K_REM, qi.qid, msg_id))
        self._unref(pos >> 32)
        self._j_live_hint -= 1
        if self._j_live_hint <= 0:
            self._maybe_compact()

    def removals_must_sync(self) -> None:
        self._j_must = True  # the journal holds them: the next sync fsyncs it

    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        qi = self._qget(vhost, queue)
        if qi is None or msg_id not in qi:
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
        data = self._fs.pread(f.fd, n, at & 0xFFFFFFFF)
        if len(data) != n:
            raise StoreError("message body truncated in its segment")
        return data

    def _drop_segment(self, seg_no: int) -> None:
        """Close and delete a segment nothing refers to (caller holds ``_lock``)."""
        f = self._segs.pop(seg_no, None)
        self._rotated.pop(seg_no, None)  # deleted: nothing of it needs an fsync any more
        if f is not None:
            self._close_fd(f.fd)
            try:
                self._fs.unlink(f.path)
            except FileNotFoundError:
                pass

    def _close_fd(self, fd: int) -> None:
        """Close ``fd`` now, or after the running fsync (caller holds ``_lock``)."""
        if self._fsyncing:
            self._closing.append(fd)
        else:
            self._fs.close(fd)

    # -- write-out and sync ----------------------------------------------------------------------------------
    def _write_file(self, f: _File) -> None:
        """pwrite the buffer at its offset (caller holds _lock)."""
        write_out(f, self._pwrite)

    def _write_segments(self) -> None:
        """Write out every segment with buffered bytes: only the current one is appended to (a
        rotated one was written out at its rotation, but is kept here after a failed write)."""
        for f in self._rotated.values():
            self._write_file(f)
        if self._seg is not None:
            self._write_file(self._seg)

    def _write_all(self) -> None:
        self._write_segments()
        if self._j is not None:
            self._write_file(self._j)

    def _rewrite_after_failed_fsync(self) -> None:
        """Write again what a failed fsync may have left unwritten (caller holds ``_lock``)."""
        for f in (*self._rotated.values(), self._seg, self._j):
            if f is not None and f.rewrite:
                rewrite_unsynced(f, self._fs.pread, self._pwrite)

    # -- stream queues (engine.streams._files: one directory of segment files per stream) -----------
    def _stream_logs(self) -> FileStreams:
        if self._streams is None:
            self._streams = FileStreams(self.path, fsync=self.fsync, fs=self._fs)
        return self._streams

    def sync(self, token: int) -> None:
        """Make durable everything appended so far (a superset of what ``Sync(token)`` covers)."""
        if self._streams is not None:
            self._streams.sync()
        with self._sync_lock:
            with self._lock:
                try:
                    self._write_all()
                    self._rewrite_after_failed_fsync()
                except OSError as exc:
                    self._mark_failed(exc)
                    raise StoreError(f"message store cannot write ({self._failed})") from None
                self._failed = None
                doomed, self._doomed = self._doomed, []
                for no in doomed:
                    if no not in self._refs and no != self._seg_no:
                        self._drop_segment(no)
                if not self.fsync:
                    self._rotated.clear()  # written out above, and nothing is fsynced
                    return
                if self._seg is not None:
                    try:
                        zero_ahead(self._seg, self.segment_size, self._pwrite)
                    except OSError as exc:  # only an optimisation: the data was written above
                        log.debug("writing zeros ahead failed: %s", exc)
                files = [f for f in self._rotated.values() if f.dirty]
                rotated, self._rotated = self._rotated, {}
                if self._seg is not None and self._seg.dirty:
                    files.append(self._seg)
                j_must = False
                j = self._j
                if j is not None and j.dirty:
                    if self._j_must or not files or self._j_lazy_syncs >= JOURNAL_LAZY_SYNCS:
                        files.append(j)
                        j_must, self._j_must, self._j_lazy_syncs = self._j_must, False, 0
                    else:
                        self._j_lazy_syncs += 1
                fds = []
                marks = []
                for f in files:
                    f.dirty = False
                    fds.append(f.fd)
                    marks.append(f.written)
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                self._fsyncing = True
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
                        f.dirty = f.rewrite = True
                    rotated.update(self._rotated)  # what was not deleted meanwhile stays to sync
                    self._rotated = {no: f for no, f in rotated.items() if no in self._segs}
                    self._j_must = self._j_must or j_must
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    self._mark_failed(exc)
                raise StoreError(f"message store cannot sync ({self._failed})") from None
            else:
                for f, mark in zip(files, marks, strict=True):
                    f.synced = max(f.synced, mark)
            finally:
                with self._lock:
                    self._fsyncing = False
                    closing, self._closing = self._closing, []
                for fd in closing:
                    self._fs.close(fd)

    def _fsync_dir(self, path: str) -> None:
        fd = self._fs.open(path, os.O_RDONLY)
        try:
            self._fsync_full(fd)
        finally:
            self._fs.close(fd)

    def close(self) -> None:
        """Write out and fsync everything (when syncing), release the directory."""
        if self._lock_fd < 0:
            return
        self._j_must = True  # the ride-along records too
        try:
            self.sync(0)
        except (StoreError, OSError) as exc:
            log.error("closing the store: %s", exc)
        if self._streams is not None:
            self._streams.close()
        with self._lock:
            for f in self._segs.values():
                self._fs.close(f.fd)
            self._segs.clear()
            if self._j is not None:
                self._fs.close(self._j.fd)
                self._j = None
            self._fs.close(self._lock_fd)
            self._lock_fd = -1

