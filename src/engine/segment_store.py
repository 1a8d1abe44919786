"""Public home of :class:`SegmentStore`, the embedded durable store (see ``engine._segments.store``).

The implementation does file I/O and takes locks, so it lives in a subpackage: the engine core
modules next to this one stay free of ``os``/``threading`` imports.
"""

from ._segments.store import SegmentStore

__all__ = ["SegmentStore"]
