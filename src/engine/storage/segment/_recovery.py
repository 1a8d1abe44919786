"""Loading a SegmentStore's data directory: the journal replayed into the per-queue indexes, the
head of each queue materialised, unreferenced segments dropped (the recovery half of ``store.py``).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from zlib import crc32

from ..._message import Message
from ...records import _REC, _decode_message, _records
from ...store import Recovered, StoredMessage, StoreError
from ._files import _File
from ._index import _Page, _QIndex
from ._parts import StoreParts
from ._queuedefs import _IDLE, _QueueDefs
from ._records import (
    _CNT,
    _ENQ,
    _EXP,
    _MARK,
    _NEXTQ,
    _REM,
    JRN_MAGIC,
    K_CNT,
    K_ENQ,
    K_EXP,
    K_MARK,
    K_META,
    K_NEXTQ,
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
    decode_meta,
    decode_plain_queue,
    is_enqueue_marker,
    is_expiry_marker,
    meta_to_def,
)

log = logging.getLogger("sansmq.store")



class Recovery(StoreParts):
    """``SegmentStore._load`` and the journal replay it uses (a mixin of ``SegmentStore``)."""

    def _load(self) -> Recovered:
        """Replay the journal straight into the per-queue index arrays, then materialise the first
        ``recover_window`` messages of each queue; the rest stay in the queue's page, unread (a torn
        record among them is found and dropped when it is paged in)."""
        jpath = os.path.join(self.path, "journal")
        by_qid: dict[int, _QIndex] = {}
        #: loaded idle queues whose journal qid may still get messages: qid -> vhost, name (two
        #: dicts, no tuple per queue)
        self._idle_names: dict[int, str] = {}
        self._idle_vhosts: dict[int, str] = {}
        with self._journal_data(jpath) as data:
            magic, n_rec, torn, cov, covered = self._replay_journal(data, jpath, by_qid)
        existing = [int(n) for n in self._fs.listdir(os.path.join(self.path, "segments")) if n.isdigit()]
        from_segments = self._replay_markers(sorted(existing), cov, covered, by_qid)
        del self._idle_names, self._idle_vhosts
        for v in self._qs.values():  # the loaded idle queues drop their qids
            for qname, x in v.items():
                if type(x) is int:
                    v[qname] = _IDLE
        # segment references, and the files they keep
        refs = self._refs
        for qi in by_qid.values():
            for seg, n in qi.segment_counts().items():
                refs[seg] = refs.get(seg, 0) + n
        for no in existing:
            if no in refs:
                fd = self._fs.open(self._seg_path(no), os.O_RDONLY)
                self._segs[no] = _File(self._seg_path(no), fd, self._fs.fsize(fd))
        # materialise each queue's head; a message shared by queues is decoded once
        decoded: dict[int, Message | None] = {}
        budget = self.memory_bodies
        rec = Recovered(list(self._vhosts), list(self._exchanges.values()), [], list(self._bindings.values()),
                        docs=dict(self._docs))
        max_id = 0
        for vname, qname, x in self._all_queues():
            if isinstance(x, int):
                continue
            qi = x
            if not qi.live:
                if qi.qdef is None:  # emptied plain queue: idle again (not at run time, where a queue
                    self._qs[vname][qname] = _IDLE  # emptied by every ack would journal an ADD_Q per message)
                continue
            max_id = max(max_id, qi.top())
            budget = self._materialise((vname, qname), qi, rec, decoded, budget)
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
                    self._fs.unlink(self._seg_path(no))
                except FileNotFoundError:
                    pass
        # never reuse the number of a segment the journal covers but the disk lost (its directory
        # entry was not durable yet): markers at positions below ``cov`` are never replayed
        self._seg_no = max(max(existing, default=0), cov >> 32)
        live = (sum(qi.live + len(qi.counts or ()) + len(qi.exp or ()) for qi in by_qid.values())
                + len(self._vhosts) + len(self._exchanges) + self._queue_count() + len(self._bindings)
                + len(self._docs))
        with self._lock:
            self._new_segment()
            if torn or self.dropped_on_recovery or from_segments or not magic or n_rec > 2 * live + 64:
                self._compact()  # rewrite the live state (also cuts a torn tail)
            else:  # already compact enough: append to it as it is
                fd = self._fs.open(jpath, os.O_RDWR)
                self._j = _File(jpath, fd, self._fs.fsize(fd))
                self._j_live_hint = max(1024, live)
        return rec

    def _materialise(self, key: tuple[str, str], qi: _QIndex, rec: Recovered, decoded: dict[int, Message | None],
                     budget: int) -> int:
        """Read the first ``recover_window`` messages of a queue into ``rec`` (a message shared by
        queues is decoded once, via ``decoded``; bodies past the ``budget`` of bytes stay on disk),
        page the rest unread, and forget records that are missing or torn. Returns the budget left."""
        refs = self._refs
        stored: list[StoredMessage] = []
        bad: list[int] = []
        entries = qi.entries()
        nxt = next(entries, None)
        while nxt is not None and len(stored) < self.recover_window:
            mid, pos = nxt
            nxt = next(entries, None)
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
        if nxt is not None:
            page = _Page()
            tail = qi.live - len(stored) - len(bad)
            if qi.last_live() - nxt[0] == tail - 1:
                page.add_range(nxt[0], tail)  # consecutive ids: a few runs, no walk of the entries
            else:
                page.add_stored(nxt[0])
                for m, _ in entries:
                    page.add_stored(m)
            self._pages[key] = page
            rec.paged[key] = tail
        for mid in bad:  # never confirmed: forget them (the journal is rewritten below)
            self.dropped_on_recovery += 1
            pos = qi.pop(mid)
            left = refs[pos >> 32] - 1
            if left:
                refs[pos >> 32] = left
            else:
                del refs[pos >> 32]
        return budget

    @contextmanager
    def _journal_data(self, jpath: str) -> Iterator[bytes | mmap.mmap]:
        """The journal's bytes (mapped on a real file system: a big journal costs no heap)."""
        try:
            fd = self._fs.open(jpath, os.O_RDONLY)
        except FileNotFoundError:
            yield b""
            return
        try:
            with self._fs.mapped(fd) as data:
                yield data
        finally:
            self._fs.close(fd)

    def _replay_journal(self, data: bytes | mmap.mmap, jpath: str, by_qid: dict[int, _QIndex],
                        ) -> tuple[bytes, int, bool, int, set[tuple[int, int]]]:
        """Replay the journal's valid records into ``by_qid`` and the definitions. Returns its magic,
        the records replayed, whether a torn tail was dropped, and the enqueue coverage (the highest
        message position its enqueues cover and the (queue id, message id) enqueued at exactly it)."""
        n_rec = 0  # records replayed
        torn = False
        #: the highest message position the journal's enqueues cover (see ``_replay_markers``) and
        #: the journal offset of its first enqueue at exactly that position (-1: none yet)
        cov, cov_from = 0, -1
        magic = bytes(data[: len(JRN_MAGIC)])
        if magic == JRN_MAGIC:
            view = memoryview(data)
            off, end = len(JRN_MAGIC), len(data)
            rec_size = _REC.size
            while off + rec_size <= end:
                n, crc = _REC.unpack_from(view, off)
                stop = off + rec_size + n
                if stop > end or not n or crc32(view[off + rec_size : stop]) != crc:
                    break
                p = view[off + rec_size : stop]
                at, off = off, stop
                n_rec += 1
                kind = p[0]
                if kind == K_ENQ:
                    _, qid, mid, pos = _ENQ.unpack(p)
                    if pos >= cov and (pos > cov or cov_from < 0):
                        cov, cov_from = pos, at
                    self._replay_enqueue(qid, mid, pos, by_qid)
                elif kind == K_REM:
                    _, qid, mid = _REM.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None:
                        qi.pop(mid)
                elif kind == K_CNT:
                    _, qid, mid, count = _CNT.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None and mid in qi:
                        if qi.counts is None:
                            qi.counts = {}
                        qi.counts[mid] = count
                elif kind == K_EXP:
                    _, qid, mid, when = _EXP.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None and mid in qi:
                        if qi.exp is None:
                            qi.exp = {}
                        qi.exp[mid] = when
                elif kind == K_MARK:
                    (_, mark) = _MARK.unpack(p)
                    if mark > cov:
                        cov, cov_from = mark, -1
                elif kind == K_NEXTQ:
                    self._next_qid = max(self._next_qid, _NEXTQ.unpack(p)[1])
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
            covered = _enqueued_at(view, cov, cov_from, off)
            p = view = None  # type: ignore[assignment]  # release the mapping's exports
        elif magic.startswith(b"SMQJRN"):
            raise StoreError(f"{jpath} was written by another sansmq store format version "
                             f"({magic[:7].decode(errors='replace')}; this one reads {JRN_MAGIC[:7].decode()})")
        elif len(data):
            raise StoreError(f"{jpath} is not a sansmq journal")
        else:
            covered = set()
        return magic, n_rec, torn, cov, covered

    def _replay_enqueue(self, qid: int, mid: int, pos: int, by_qid: dict[int, _QIndex]) -> None:
        qi = by_qid.get(qid)
        if qi is None and qid in self._idle_names:
            qname = self._idle_names.pop(qid)
            qi = by_qid[qid] = self._qs[self._idle_vhosts.pop(qid)][qname] = _QIndex(qid)
        if qi is not None:
            qi.add(mid, pos)

    def _replay_markers(self, segments: list[int], cov: int, covered: set[tuple[int, int]],
                        by_qid: dict[int, _QIndex]) -> int:
        """Apply the enqueue markers written beside their messages (``SegmentStore.enqueue``) that
        the journal does not hold: those of messages past ``cov``, and at ``cov`` those not in
        ``covered``. The journal is appended in the markers' order and a journal record is durable
        only with all before it, so nothing after such an enqueue (a removal, a queue's deletion)
        can be in the journal either. Returns how many were applied."""
        applied = 0
        for no in segments:
            if no < cov >> 32:
                continue
            start = (cov & 0xFFFFFFFF) if no == cov >> 32 else len(SEG_MAGIC)
            try:
                fd = self._fs.open(self._seg_path(no), os.O_RDONLY)
                try:
                    if self._fs.pread(fd, len(SEG_MAGIC), 0) != SEG_MAGIC:
                        continue
                    data = self._fs.pread(fd, max(0, self._fs.fsize(fd) - start), start)
                finally:
                    self._fs.close(fd)
            except OSError as exc:
                raise StoreError(f"segment {no}: cannot read its tail ({exc})") from None
            for _, p in _records(data, 0)[0]:
                if is_expiry_marker(p):  # follows its enqueue marker: the message is known by now
                    _, qid, mid, when = _EXP.unpack(p)
                    qi = by_qid.get(qid)
                    if qi is not None and mid in qi and (qi.exp is None or mid not in qi.exp):
                        if qi.exp is None:
                            qi.exp = {}
                        qi.exp[mid] = when
                        applied += 1
                    continue
                if not is_enqueue_marker(p):
                    continue
                _, qid, mid, pos = _ENQ.unpack(p)
                # a queue id whose definition a damaged journal lost is never given to another
                # queue: its markers would otherwise move its messages there at a later recovery
                self._next_qid = max(self._next_qid, qid + 1)
                if pos > cov or (pos == cov and (qid, mid) not in covered):
                    self._replay_enqueue(qid, mid, pos, by_qid)
                    applied += 1
        if applied:
            log.info("recovery: %d enqueue(s) taken from the segments' markers", applied)
        return applied

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
            x.clear()
        elif isinstance(x, int) and x:  # idle with a qid (while loading, see _apply_meta)
            self._idle_names.pop(x, None)
            self._idle_vhosts.pop(x, None)


def _enqueued_at(view: memoryview, cov: int, start: int, end: int) -> set[tuple[int, int]]:
    """(queue id, message id) of the journal's enqueues at position ``cov``, read from journal offset
    ``start`` (the first of them) to ``end`` (the end of the valid records)."""
    out: set[tuple[int, int]] = set()
    if start < 0:
        return out
    for _, p in _records(view[start:end], 0)[0]:
        if p[0] == K_ENQ and len(p) == _ENQ.size:
            _, qid, mid, pos = _ENQ.unpack(p)
            if pos == cov:
                out.add((qid, mid))
    return out
