"""The queues of a SegmentStore as ``Recovered.queues`` sees them, and the QueueDef of an index entry."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...store import QueueDef
from ._index import _QIndex

#: ``SegmentStore._qs`` value of an idle plain queue (a cached small int: costs nothing per queue)
_IDLE = 0


class _QueueDefs(Sequence[QueueDef]):
    """``Recovered.queues`` of a SegmentStore: the queues as loaded (vhost -> name -> index),
    each QueueDef made when it is read."""

    __slots__ = ("_qs",)

    def __init__(self, qs: dict[str, dict[str, int | _QIndex]]) -> None:
        self._qs = qs

    def __iter__(self) -> Iterator[QueueDef]:
        qdef = queue_def
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


def queue_def(vhost: str, name: str, x: int | _QIndex) -> QueueDef:
    """The definition of queue ``name`` whose ``SegmentStore._qs`` entry is ``x``."""
    if type(x) is int or x.qdef is None:  # type: ignore[union-attr]
        return QueueDef(vhost, name)
    return x.qdef  # type: ignore[union-attr,return-value]
