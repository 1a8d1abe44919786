"""Public home of :class:`SegmentStore`, the embedded durable store (see ``engine.storage.segment.store``).

The implementation does file I/O and takes locks, so it lives in ``engine.storage``: the engine core
modules next to this one stay free of ``os``/``threading`` imports.
"""

from .storage.segment.store import SegmentStore

__all__ = ["SegmentStore"]
