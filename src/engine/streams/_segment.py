"""One segment file of a stream log: the record layout's constants, the segment's buffer and sparse
index, and its sidecar (the layout itself is described in ``_files``)."""

from __future__ import annotations

import sys
from array import array
from struct import Struct
from zlib import crc32

from ..fs import FileSystem
from .filtering import ChunkFilters

MAGIC = b"SMQSTRM1"
HEAD = Struct("<QqB")  # offset, timestamp ms, kind | flags
PROD = Struct("<QH")  # publishing id, len(producer name)
SNAP = Struct("<II")  # consumers, producers
ENT = Struct("<QH")  # value, len(name)
U32 = Struct("<I")
CHUNKS = Struct("<IH")  # chunk filters in a sidecar: count, bytes each
K_MSG, K_TRACK, K_SNAP = 1, 2, 3
F_FILTER, F_CHUNK, F_PRODUCER = 0x20, 0x40, 0x80
KIND = 0x0F
IDX_MAGIC = b"SMQSIDX2"
IDX = Struct("<QQQqqI")  # first, end, size, last ts, last chunk, entries
INDEX_STRIDE = 64
INDEX_BYTES = 64 << 10
#: a segment's buffer is written out on the loop thread once it is this large
FLUSH_AT = 1 << 20
#: bytes read at once when scanning for records
READ_BLOCK = 64 << 10


class Segment:
    """One segment file: what is written, the buffer, and its sparse index."""

    __slots__ = ("path", "fd", "first", "end", "written", "buf", "dirty", "last_ts", "chunk",
                 "idx_off", "idx_pos", "idx_ts", "sidecar", "synced", "rewrite")

    def __init__(self, path: str, fd: int, first: int, written: int) -> None:
        self.path = path
        self.fd = fd
        self.first = first
        self.end = first  # offset after its last message
        self.written = written
        self.buf = bytearray()
        self.dirty = False
        self.last_ts = -1
        self.chunk = -1  # first offset of its last chunk
        self.idx_off = array("Q")
        self.idx_pos = array("Q")
        self.idx_ts = array("q")
        self.sidecar = False  # its index is saved next to it
        #: what the last successful fsync covered; whether a failed fsync left pages to write again
        self.synced = written
        self.rewrite = False

    @property
    def idx_path(self) -> str:
        return self.path[:-4] + ".idx"

    def save_index(self, chunks: ChunkFilters) -> bytes:
        rows = chunks.between(self.first, self.end)
        firsts = array("Q", [r[0] for r in rows])
        arrays = [self.idx_off, self.idx_pos, self.idx_ts, firsts]
        if sys.byteorder != "little":
            arrays = [array(a.typecode, a) for a in arrays]
            for a in arrays:
                a.byteswap()
        body = (IDX_MAGIC + IDX.pack(self.first, self.end, self.written, self.last_ts, self.chunk,
                                      len(self.idx_off)) + b"".join(a.tobytes() for a in arrays[:3])
                + CHUNKS.pack(len(rows), chunks.nbytes) + arrays[3].tobytes()
                + bytes(r[2] for r in rows) + b"".join(r[1] for r in rows))
        return body + U32.pack(crc32(body))

    def load_index(self, fs: FileSystem, chunks: ChunkFilters) -> bool:
        """Take the index (and chunk filters, into ``chunks``) from the sidecar if it is intact and
        matches the segment's size."""
        try:
            data = fs.read_file(self.idx_path)
        except FileNotFoundError:
            return False
        head = len(IDX_MAGIC) + IDX.size
        if len(data) < head + 4 or data[: len(IDX_MAGIC)] != IDX_MAGIC:
            return False
        if crc32(memoryview(data)[:-4]) != U32.unpack_from(data, len(data) - 4)[0]:
            return False
        first, end, size, last_ts, chunk, n = IDX.unpack_from(data, len(IDX_MAGIC))
        at = head + 24 * n
        if first != self.first or size != fs.fsize(self.fd) or len(data) < at + CHUNKS.size + 4:
            return False
        nchunks, nbytes = CHUNKS.unpack_from(data, at)
        at += CHUNKS.size
        if len(data) != at + nchunks * (9 + nbytes) + 4:
            return False
        firsts = array("Q")
        for i, a in enumerate((self.idx_off, self.idx_pos, self.idx_ts)):
            a.frombytes(data[head + 8 * n * i: head + 8 * n * (i + 1)])
        firsts.frombytes(data[at:at + 8 * nchunks])
        if sys.byteorder != "little":
            for a in (self.idx_off, self.idx_pos, self.idx_ts, firsts):
                a.byteswap()
        flags = data[at + 8 * nchunks: at + 9 * nchunks]
        blooms = at + 9 * nchunks
        for i, c in enumerate(firsts):
            chunks.load(c, data[blooms + i * nbytes: blooms + (i + 1) * nbytes], bool(flags[i]))
        self.end, self.written, self.last_ts, self.chunk, self.sidecar = end, size, last_ts, chunk, True
        return True

    @property
    def size(self) -> int:
        return self.written + len(self.buf)

    def index(self, offset: int, pos: int, ts: int) -> None:
        """Note a message record (its position and time) in the sparse index when due."""
        if (not self.idx_off or offset - self.idx_off[-1] >= INDEX_STRIDE
                or pos - self.idx_pos[-1] >= INDEX_BYTES):
            self.idx_off.append(offset)
            self.idx_pos.append(pos)
            self.idx_ts.append(ts)


def pack_names(entries: dict[str, int]) -> bytes:
    out = []
    for name, value in entries.items():
        b = name.encode("utf-8", "surrogateescape")
        out.append(ENT.pack(value, len(b)))
        out.append(b)
    return b"".join(out)


def unpack_snapshot(p: memoryview) -> tuple[dict[str, int], dict[str, int]]:
    nc, np_ = SNAP.unpack_from(p, HEAD.size)
    o = HEAD.size + SNAP.size
    maps: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for i in range(nc + np_):
        value, n = ENT.unpack_from(p, o)
        o += ENT.size
        maps[0 if i < nc else 1][str(p[o:o + n], "utf-8", "surrogateescape")] = value
        o += n
    if o != len(p):
        raise ValueError("snapshot length mismatch")
    return maps


def filter_field(value: str) -> bytes:
    """The ``F_FILTER`` field of a message with filter ``value``."""
    raw = value.encode("utf-8", "surrogateescape")
    return U32.pack(len(raw)) + raw


#: the ``F_FILTER`` field of an unfiltered message
NO_FILTER = U32.pack(0)


def segment_name(first: int) -> str:
    return f"{first:020d}.seg"
