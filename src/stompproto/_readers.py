"""Incremental STOMP frame parser over a ReceiveBuffer.

Wire rules (decided here, documented in the package docstring):

* Lines end in LF or CRLF for every version (RabbitMQ's leniency; 1.2 made it official).
* Headers split at the first colon; names and values are never trimmed, in any version
  (RabbitMQ's behaviour; 1.1+ forbid trimming). Repeated headers: the first one wins.
* Unescaping: none for CONNECT/CONNECTED, none before the version is known, none in 1.0;
  ``\\\\ \\n \\c`` in 1.1, plus ``\\r`` in 1.2; anything else after a backslash is an error.
* Each EOL between frames (including the optional EOLs after a frame's NUL) is one
  ``Heartbeat`` event, so any split of the input gives the same events.
* Limits are checked as bytes arrive: command and header lines, header count, head size,
  ``content-length`` as soon as it is parsed, the running body size without it.

Offsets kept between calls are relative to ``buf.pos`` (the frame's first byte), so the
buffer may compact its consumed prefix at any time.
"""

from __future__ import annotations

import enum
import re

from ._buffer import ReceiveBuffer
from ._errors import RemoteProtocolError
from ._events import COMMAND_TO_EVENT, Connect, Connected, Frame, Heartbeat

__all__ = ["FrameReader", "unescape", "UNESCAPES"]

_COMMANDS: dict[bytes, type[Frame]] = {c.encode(): cls for c, cls in COMMAND_TO_EVENT.items()}
_COMMAND_LIST = tuple(_COMMANDS)
_STOMP = b"STOMP"
_NO_ESCAPE_FRAMES = (Connect, Connected)
_FAST_HEAD_SCAN = 1 << 16  # how far the one-shot "\n\n" search may look
_STR_COMMANDS: dict[str, type[Frame]] = dict(COMMAND_TO_EVENT)
class _Partial(enum.Enum):
    PARTIAL = "PARTIAL"  # _fast_frame: head parsed, body not complete yet


_PARTIAL = _Partial.PARTIAL

UNESCAPES: dict[str, dict[str, str]] = {
    "1.1": {"\\": "\\", "n": "\n", "c": ":"},
    "1.2": {"\\": "\\", "n": "\n", "c": ":", "r": "\r"},
}
_ESCAPE_RE = re.compile(r"\\(.?)", re.S)

_IDLE, _HEAD, _BODY = 0, 1, 2


def _shown(raw: bytes) -> str:
    """Peer bytes quoted for an error text: ``'GARBAGE'``, not ``b'GARBAGE'``; control characters
    stay escaped (the text goes into an ERROR frame's header, which cannot carry CR or LF)."""
    return repr(raw.decode("utf-8", "replace"))


def unescape(text: str, table: dict[str, str]) -> str:
    """Undo header escaping; an undefined (or truncated) escape is a RemoteProtocolError."""

    def repl(m: re.Match[str]) -> str:
        try:
            return table[m.group(1)]
        except KeyError:
            raise RemoteProtocolError(
                f"undefined escape sequence {m.group(0)!r} in header"
            ) from None

    return _ESCAPE_RE.sub(repl, text)


class FrameReader:
    """Turns buffered bytes into Frame / Heartbeat events, one per ``next`` call."""

    __slots__ = (
        "_buf", "max_frame_size", "max_header_count", "max_header_line", "max_body_size",
        "_phase", "_line_start", "_scan", "_lines", "_cls", "_stomp_cmd", "headers",
        "_clen", "_body_start", "_fast_scan",
    )

    def __init__(
        self, buf: ReceiveBuffer, *, max_frame_size: int, max_header_count: int,
        max_header_line: int, max_body_size: int,
    ) -> None:
        self._buf = buf
        self.max_frame_size = max_frame_size
        self.max_header_count = max_header_count
        self.max_header_line = max_header_line
        self.max_body_size = max_body_size
        self._phase = _IDLE
        self._line_start = 0
        self._scan = 0
        self._lines: list[bytes] = []
        self._cls: type[Frame] | None = None
        self._stomp_cmd = False
        self.headers: dict[str, str] | None = None  # of the frame in progress, once parsed
        self._clen: int | None = None
        self._body_start = 0
        self._fast_scan = min(max_frame_size, _FAST_HEAD_SCAN)

    def set_size_limits(self, max_frame_size: int, max_body_size: int) -> None:
        """Change the frame and body caps (between frames: a frame in progress keeps its checks)."""
        self.max_frame_size = max_frame_size
        self.max_body_size = max_body_size
        self._fast_scan = min(max_frame_size, _FAST_HEAD_SCAN)

    def mid_frame(self) -> bool:
        """True when unconsumed bytes belong to an unfinished frame (or a lone CR)."""
        return self._phase != _IDLE or len(self._buf) > 0

    # -- entry point -------------------------------------------------------------------

    def next(self, version: str | None) -> Frame | Heartbeat | None:
        """The next event, or None when more data is needed. ``version`` selects the
        unescaping rules for the frame whose head completes during this call."""
        buf = self._buf.data
        pos = self._buf.pos
        if self._phase == _IDLE:
            self.headers = None  # the previous frame's are no longer "the frame in progress"
            end = len(buf)
            if pos >= end:
                return None
            c = buf[pos]
            if c == 10:
                self._buf.consume_to(pos + 1)
                return Heartbeat()
            if c == 13:
                if pos + 1 >= end:
                    return None
                if buf[pos + 1] == 10:
                    self._buf.consume_to(pos + 2)
                    return Heartbeat()
                raise RemoteProtocolError("unexpected CR between frames")
            event = self._fast_frame(buf, pos, version)
            if event is not None:
                return event if event is not _PARTIAL else None
            self._phase = _HEAD
            self._lines = []
            self._line_start = self._scan = 0
            if not self._fast_head(buf, pos, version):
                if not self._slow_head(buf, pos, version):
                    return None
        elif self._phase == _HEAD:
            if not self._slow_head(buf, pos, version):
                return None
        return self._body(buf, pos)

    # -- head ----------------------------------------------------------------------------

    def _fast_frame(self, buf: bytes | bytearray, pos: int, version: str | None) -> Frame | _Partial | None:
        """The common frame in one go: LF-only head already buffered, valid UTF-8, a known command,
        no escapes to undo, no repeated or malformed header. Returns the frame, ``_PARTIAL`` when
        the head was parsed but the body is not all here yet (phase ``_BODY``), or None when the
        general path must handle it (which also reports every error with its usual message)."""
        e = buf.find(b"\n\n", pos, pos + self._fast_scan)
        if e < 0:
            return None
        if e - pos > self.max_header_line:
            return None
        try:
            text = buf[pos:e].decode()
        except UnicodeDecodeError:
            return None
        if "\r" in text:
            return None
        lines = text.split("\n")
        command = lines[0]
        cls = _STR_COMMANDS.get(command)
        if cls is None or len(lines) > self.max_header_count + 1:
            return None
        if "\\" in text and version is not None and version != "1.0" and cls not in _NO_ESCAPE_FRAMES:
            return None  # something to unescape
        del lines[0]
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name in headers:
                return None
            headers[name] = value
        head_len = e + 2 - pos
        bs = e + 2
        clen = headers.get("content-length")
        if clen is not None:
            if not (clen.isascii() and clen.isdigit()):
                return None
            n = int(clen)
            if n > self.max_body_size or head_len + n + 1 > self.max_frame_size:
                return None
            nul = bs + n
            if len(buf) <= nul or buf[nul] != 0:
                nul = -1
        else:
            n = -1
            nul = buf.find(b"\x00", bs, bs + self.max_body_size + 1)
            if nul >= 0 and nul + 1 - pos > self.max_frame_size:
                nul = -1
        self._cls = cls
        self.headers = headers
        if nul < 0:  # the body is still arriving (or is wrong: _body says so)
            self._stomp_cmd = command == "STOMP"
            self._clen = None if n < 0 else n
            self._phase = _BODY
            self._body_start = self._scan = head_len
            return self._body(buf, pos) or _PARTIAL
        if cls is Connect:
            event: Frame = Connect(headers, bytes(buf[bs:nul]), command == "STOMP")
        else:
            event = cls(headers, bytes(buf[bs:nul]))
        self._buf.consume_to(nul + 1)
        return event

    def _fast_head(self, buf: bytes | bytearray, pos: int, version: str | None) -> bool:
        """Whole LF-only head already buffered: one find, no line-by-line scanning."""
        e = buf.find(b"\n\n", pos, pos + min(self.max_frame_size, _FAST_HEAD_SCAN))
        if e < 0:
            return False
        block = bytes(buf[pos:e])
        if b"\r" in block:
            return False  # CRLF (or a bare CR): the first "\n\n" is not the head's end
        head_len = e + 2 - pos
        if head_len > self.max_frame_size:
            raise RemoteProtocolError(f"frame too large (at most {self.max_frame_size} bytes)")
        if block.count(b"\n") > self.max_header_count:
            raise RemoteProtocolError("too many headers")
        max_line = self.max_header_line
        if len(block) > max_line and max(map(len, block.split(b"\n"))) > max_line:
            raise RemoteProtocolError("header line too long")
        i = block.find(b"\n")
        if i < 0:
            self._command(block)
            self._finish_head(b"", head_len, version)
        else:
            self._command(block[:i])
            self._finish_head(block[i + 1 :], head_len, version)
        return True

    def _slow_head(self, buf: bytes | bytearray, pos: int, version: str | None) -> bool:
        """Line by line, resuming where the previous call stopped; checks limits on the
        partial line so an oversized or garbage head fails before it is complete."""
        max_line = self.max_header_line
        lines = self._lines
        while True:
            s = pos + self._line_start
            lf = buf.find(b"\n", pos + self._scan)
            if lf < 0:
                end = len(buf)
                partial = end - s
                if partial > max_line + 1 or (partial == max_line + 1 and buf[end - 1] != 13):
                    raise RemoteProtocolError("header line too long")
                if end - pos > self.max_frame_size:
                    raise RemoteProtocolError(f"frame too large (at most {self.max_frame_size} bytes)")
                if not lines:
                    self._check_command_prefix(bytes(buf[s:end]))
                self._scan = end - pos
                return False
            stop = lf - 1 if lf > s and buf[lf - 1] == 13 else lf
            if stop - s > max_line:
                raise RemoteProtocolError("header line too long")
            if lf + 1 - pos > self.max_frame_size:
                raise RemoteProtocolError(f"frame too large (at most {self.max_frame_size} bytes)")
            self._line_start = self._scan = lf + 1 - pos
            if stop == s:  # blank line: end of head
                self._finish_head(b"\n".join(lines[1:]), lf + 1 - pos, version)
                return True
            line = bytes(buf[s:stop])
            if not lines:
                self._command(line)
            elif len(lines) > self.max_header_count:
                raise RemoteProtocolError("too many headers")
            lines.append(line)

    def _command(self, line: bytes) -> None:
        cls = _COMMANDS.get(line)
        if cls is None:
            raise RemoteProtocolError(f"unknown command {_shown(line[:32])}")
        self._cls = cls
        self._stomp_cmd = line == _STOMP

    @staticmethod
    def _check_command_prefix(partial: bytes) -> None:
        p = partial[:-1] if partial.endswith(b"\r") else partial
        if (p != partial and p not in _COMMANDS) or not any(
            c.startswith(p) for c in _COMMAND_LIST
        ):
            raise RemoteProtocolError(f"unknown command {_shown(partial[:32])}")

    def _finish_head(self, raw: bytes, head_len: int, version: str | None) -> None:
        """Parse the header lines (``raw``, LF-joined, without the command line)."""
        cls = self._cls
        table = None
        if version is not None and version != "1.0" and cls not in _NO_ESCAPE_FRAMES:
            table = UNESCAPES[version]
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise RemoteProtocolError("header is not valid UTF-8") from None
        headers: dict[str, str] = {}
        self.headers = headers
        if text:
            if table is not None and "\\" not in text:
                table = None  # nothing to unescape in this frame
            for line in text.split("\n"):
                name, sep, value = line.partition(":")
                if not sep or not name:
                    raise RemoteProtocolError(f"malformed header line {line[:64]!r}")
                if table is not None and "\\" in line:
                    name = unescape(name, table)
                    value = unescape(value, table)
                if name not in headers:
                    headers[name] = value
        clen = headers.get("content-length")
        if clen is not None:
            if not (clen.isascii() and clen.isdigit()):
                raise RemoteProtocolError(f"invalid content-length {clen[:32]!r}")
            n = int(clen)
            if n > self.max_body_size:
                raise RemoteProtocolError(f"frame body too large (at most {self.max_body_size} bytes)")
            if head_len + n + 1 > self.max_frame_size:
                raise RemoteProtocolError(f"frame too large (at most {self.max_frame_size} bytes)")
            self._clen = n
        else:
            self._clen = None
        self._phase = _BODY
        self._body_start = self._scan = head_len

    # -- body ----------------------------------------------------------------------------

    def _body(self, buf: bytes | bytearray, pos: int) -> Frame | None:
        bs = pos + self._body_start
        n = self._clen
        if n is not None:
            nul = bs + n
            if len(buf) <= nul:
                return None
            if buf[nul] != 0:
                raise RemoteProtocolError("frame not terminated by NUL after content-length bytes")
        else:
            nul = buf.find(b"\x00", pos + self._scan)
            if nul < 0:
                end = len(buf)
                if end - bs > self.max_body_size:
                    raise RemoteProtocolError(f"frame body too large (at most {self.max_body_size} bytes)")
                if end - pos > self.max_frame_size:
                    raise RemoteProtocolError(f"frame too large (at most {self.max_frame_size} bytes)")
                self._scan = end - pos
                return None
            if nul - bs > self.max_body_size:
                raise RemoteProtocolError(f"frame body too large (at most {self.max_body_size} bytes)")
            if nul + 1 - pos > self.max_frame_size:
                raise RemoteProtocolError(f"frame too large (at most {self.max_frame_size} bytes)")
        cls = self._cls
        assert cls is not None and self.headers is not None
        body = bytes(buf[bs:nul])
        if cls is Connect:
            event: Frame = Connect(self.headers, body, self._stomp_cmd)
        else:
            event = cls(self.headers, body)
        self._phase = _IDLE
        self._buf.consume_to(nul + 1)
        return event
