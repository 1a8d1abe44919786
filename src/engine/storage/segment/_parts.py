"""What the segment store's parts (``Recovery``, ``Paging``, ``Compaction`` and ``SegmentStore``
itself) share: the state ``SegmentStore.__init__`` sets up and the methods one part calls on
another. Declarations only, for the type checker: each part inherits them, so mypy follows a
part's reach into the others (the values and the code are ``SegmentStore``'s)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..._message import Message
from ...fs import FileSystem
from ...store import BindingDef, ExchangeDef, QueueDef
from ._files import _File
from ._index import _Page, _QIndex

__all__ = ["StoreParts"]


class StoreParts:
    path: str
    _fs: FileSystem
    needs_sync: bool
    fsync: bool
    segment_size: int
    _lock: threading.Lock
    _sync_lock: threading.Lock
    _failed: str | None
    _vhosts: dict[str, None]
    _exchanges: dict[tuple[str, str], ExchangeDef]
    _docs: dict[tuple[str, str], str]
    _qs: dict[str, dict[str, int | _QIndex]]
    _bindings: dict[tuple[Any, ...], BindingDef]
    _next_qid: int
    _refs: dict[int, int]
    _segs: dict[int, _File]
    _rotated: dict[int, _File]
    _seg: _File | None
    _seg_no: int
    _last_msg: tuple[int, int]
    _dir_dirty: bool
    _j: _File | None
    _j_live_hint: int
    _j_must: bool
    _j_lazy_syncs: int
    _fsyncing: bool
    _closing: list[int]
    dropped_on_recovery: int
    memory_bodies: int
    _doomed: list[int]
    recover_window: int
    _pages: dict[tuple[str, str], _Page]
    dropped_paged: int

    if TYPE_CHECKING:  # defined by SegmentStore or one of the parts
        def _pwrite(self, fd: int, data: bytearray | memoryview, offset: int) -> int: ...
        def _fsync_full(self, fd: int) -> None: ...
        def _fsync_dir(self, path: str) -> None: ...
        def _close_fd(self, fd: int) -> None: ...
        def _seg_path(self, no: int) -> str: ...
        def _new_segment(self) -> None: ...
        def _drop_segment(self, seg_no: int) -> None: ...
        def _write_segments(self) -> None: ...
        def _append_message(self, msg: Message) -> int: ...
        def _unref(self, seg_no: int) -> None: ...
        def _put_queue(self, qid: int, qdef: QueueDef) -> int | _QIndex: ...
        def _qget(self, vhost: str, name: str) -> _QIndex | None: ...
        def _all_queues(self) -> Iterator[tuple[str, str, int | _QIndex]]: ...
        def _indexes(self) -> Iterator[_QIndex]: ...
        def _queue_count(self) -> int: ...
        @staticmethod
        def _qdef(vhost: str, name: str, x: int | _QIndex) -> QueueDef: ...
        def _forget_exchange(self, vhost: str, name: str) -> None: ...
        def _forget_queue_bindings(self, vhost: str, name: str) -> None: ...
        def _compact(self) -> None: ...
        def _read_record(self, pos: int) -> bytes | None: ...
        def remove(self, vhost: str, queue: str, msg_id: int) -> None: ...
