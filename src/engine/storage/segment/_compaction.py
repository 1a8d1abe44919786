"""Journal compaction of a SegmentStore: the journal rewritten as the live state (tmp, fsync, rename)."""

from __future__ import annotations

import logging
import os

from ...records import _record
from ._files import FLUSH_AT, _File
from ._parts import StoreParts
from ._records import (
    _CNT,
    _ENQ,
    _EXP,
    _MARK,
    _NEXTQ,
    JRN_MAGIC,
    K_CNT,
    K_ENQ,
    K_EXP,
    K_MARK,
    K_NEXTQ,
    OP_ADD_B,
    OP_ADD_VHOST,
    OP_PUT_DOC,
    encode_meta,
    meta_binding,
    meta_exchange,
    meta_queue,
    meta_vhost,
)

log = logging.getLogger("sansmq.store")


#: the journal is compacted when it is larger than this and than COMPACT_RATIO x the live state
COMPACT_MIN = 4 << 20
COMPACT_RATIO = 4


class Compaction(StoreParts):
    """``_maybe_compact`` / ``_compact`` (a mixin of ``SegmentStore``)."""

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
        self._write_segments()
        tmp = os.path.join(self.path, "journal.tmp")
        fd = self._fs.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
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
            for xdef in self._exchanges.values():
                out += _record(meta_exchange(xdef))
            for vname, qname, x in self._all_queues():
                out += _record(meta_queue(0 if isinstance(x, int) else x.qid, self._qdef(vname, qname, x)))
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
            # every enqueue of a message before this point is above (or was removed): recovery
            # applies only segment markers of messages from here on
            assert self._seg is not None
            out += _record(_NEXTQ.pack(K_NEXTQ, self._next_qid))
            out += _record(_MARK.pack(K_MARK, (self._seg_no << 32) | self._seg.size))
            self._last_msg = (0, 0)  # the next enqueue writes its message anew, after the mark
            flush()
            self._fsync_full(fd)
        except BaseException:
            self._fs.close(fd)
            raise
        self._fs.replace(tmp, os.path.join(self.path, "journal"))
        self._fsync_dir(self.path)
        if self._j is not None:
            self._close_fd(self._j.fd)
        self._j = _File(os.path.join(self.path, "journal"), fd, done)
        self._j_must = False
