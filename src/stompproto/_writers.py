"""Frame serialisation with per-version header escaping.

The common case (no header needs escaping) costs one join and four C-level scans of
the joined head; only frames that need it pay for ``str.translate``.
"""

from __future__ import annotations

from ._errors import LocalProtocolError
from ._events import COMMAND_TO_EVENT, Connect, Frame

__all__ = ["serialize", "encode_headers", "message_tail", "HEARTBEAT_BYTES"]

HEARTBEAT_BYTES = b"\n"

# Pre-built "COMMAND\n" prefixes (str: joined with the headers before one encode).
_PREFIX: dict[type[Frame], str] = {
    cls: cmd + "\n" for cmd, cls in COMMAND_TO_EVENT.items() if cmd != "STOMP"
}
_STOMP_PREFIX = "STOMP\n"

_ESCAPES: dict[str, dict[int, str]] = {
    "1.1": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"}),
    "1.2": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"}),
}


def encode_headers(headers: dict[str, str], escape: str | None, command: str = "MESSAGE") -> str:
    """``"name:value\n"`` for every header, escaped for ``escape`` ("1.1"/"1.2"; None = raw, as
    ``serialize``); LocalProtocolError for what that version cannot carry. Shared by ``serialize``
    and the pre-encoded MESSAGE parts (``Connection.encode_headers``) so both give the same bytes."""
    try:  # str + str only: a non-str name or value raises TypeError here
        head = "".join([k + ":" + v + "\n" for k, v in headers.items()])
    except TypeError:
        raise LocalProtocolError("header names and values must be str") from None
    if "" in headers:
        raise LocalProtocolError("empty header name")
    n = len(headers)
    # Exactly one ':' and one LF per header and no CR/backslash: nothing needs escaping.
    if escape is None:
        if "\r" in head or head.count("\n") != n or (
            head.count(":") != n and any(":" in k for k in headers)
        ):
            raise LocalProtocolError(
                f"{command} header cannot carry CR/LF (or ':' in a name) without escaping"
            )
    elif "\\" in head or "\r" in head or head.count(":") != n or head.count("\n") != n:
        if escape == "1.1" and "\r" in head:
            raise LocalProtocolError("STOMP 1.1 cannot encode CR in a header")
        t = _ESCAPES[escape]
        head = "".join([k.translate(t) + ":" + v.translate(t) + "\n" for k, v in headers.items()])
    return head


def serialize(frame: Frame, escape: str | None) -> bytes:
    """Encode ``frame``. ``escape`` is the version whose escaping applies ("1.1"/"1.2"), or
    None for raw headers (CONNECT/CONNECTED, 1.0, or before the version is known)."""
    headers = frame.headers
    body = frame.body
    head = encode_headers(headers, escape, frame.command)
    clen = headers.get("content-length")
    if clen is None:
        if body:
            head += f"content-length:{len(body)}\n"
    elif not (clen.isascii() and clen.isdigit()) or int(clen) != len(body):
        raise LocalProtocolError(f"content-length {clen!r} does not match the body")
    if type(frame) is Connect and frame.use_stomp_command:
        prefix = _STOMP_PREFIX
    else:
        prefix = _PREFIX[type(frame)]
    try:
        data = (prefix + head + "\n").encode()
        return b"".join((data, body, b"\x00"))
    except UnicodeEncodeError:
        raise LocalProtocolError("header is not encodable as UTF-8") from None
    except TypeError:
        raise LocalProtocolError("body must be bytes") from None


def message_tail(headers: dict[str, str], body: bytes, escape: str | None) -> bytes:
    """The end of a MESSAGE frame: ``headers`` (which must not hold content-length), then
    ``content-length``, the blank line, ``body`` and the NUL. Prefixed by ``b"MESSAGE\n"`` and
    further encoded header lines it is byte for byte what ``serialize`` makes of the whole frame
    with ``content-length`` last."""
    if "content-length" in headers:
        raise LocalProtocolError("message_tail() writes content-length itself")
    if type(body) is not bytes:
        raise LocalProtocolError("body must be bytes")
    head = encode_headers(headers, escape) + "content-length:" + str(len(body)) + "\n\n"
    try:
        return b"".join((head.encode(), body, b"\x00"))
    except UnicodeEncodeError:
        raise LocalProtocolError("header is not encodable as UTF-8") from None
