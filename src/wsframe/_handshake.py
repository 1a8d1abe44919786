"""The HTTP/1.1 opening handshake (RFC 6455 section 4) on top of h11."""
from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import h11

from ._deflate import PerMessageDeflate, client_accept, client_offer, parse_extension_items, server_negotiate
from ._errors import LocalProtocolError, RemoteProtocolError
from ._events import AcceptConnection, Headers, RejectConnection, Request

__all__ = ["ClientHandshake", "ServerHandshake", "accept_key", "choose_subprotocol"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 7230 token
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_OWN_HEADERS = frozenset(
    {
        b"host",
        b"upgrade",
        b"connection",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-accept",
        b"sec-websocket-protocol",
        b"sec-websocket-extensions",
        b"content-length",
        b"transfer-encoding",
    }
)


def accept_key(key: bytes) -> bytes:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (4.2.2 step 5)."""
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())


def choose_subprotocol(offered: list[str], supported: list[str] | tuple[str, ...]) -> str | None:
    """The first of ``supported`` (server preference order) the client offered, else None."""
    for proto in supported:
        if proto in offered:
            return proto
    return None


def _tokens(headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    """All comma-separated values of every ``name`` header, stripped, in order."""
    out: list[str] = []
    for key, value in headers:
        if key == name:
            out.extend(v.strip() for v in value.decode("latin-1").split(",") if v.strip())
    return out


def _values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [value for key, value in headers if key == name]


def _extra(headers: Headers) -> list[tuple[bytes, bytes]]:
    for name, _ in headers:
        if name.lower() in _OWN_HEADERS:
            raise LocalProtocolError(f"header {name!r} is set by wsframe")
    return list(headers)


def _reject(status: int, msg: str, headers: Headers | None = None, detail: str = "") -> RemoteProtocolError:
    # the body never echoes the peer's bytes; the exception message may carry them
    body = (msg + "\n").encode()
    return RemoteProtocolError(f"{msg}: {detail}" if detail else msg,
                               hint=RejectConnection(status, headers or [], body))


class ServerHandshake:
    """Reads the client's upgrade request; writes the 101 or the rejection."""

    __slots__ = ("_deflate", "_h11", "_key", "_negotiated", "_origin_check", "_request")

    def __init__(
        self,
        *,
        max_size: int,
        deflate: PerMessageDeflate | None,
        origin_check: Callable[[str | None], bool] | None,
    ) -> None:
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_size)
        self._deflate = deflate
        self._origin_check = origin_check
        self._request: h11.Request | None = None
        self._key = b""
        self._negotiated: tuple[str, PerMessageDeflate] | None = None

    def receive_data(self, data: bytes) -> None:
        self._h11.receive_data(data)

    def buffered_bytes(self) -> int:
        """Bytes of the opening request received and not parsed yet (at most ``max_size``)."""
        return len(self._h11.trailing_data[0])

    def next_request(self) -> Request | None:
        """The validated Request once it (and its empty body) is complete; None: need data.

        The caller handles EOF itself: h11 is never told about it here."""
        conn = self._h11
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _reject(exc.error_status_hint, "bad HTTP request", detail=str(exc)) from None
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Request):
                self._request = event
            elif isinstance(event, h11.Data):
                raise _reject(400, "an upgrade request must not have a body")
            elif isinstance(event, h11.EndOfMessage):
                assert self._request is not None
                return self._validate(self._request)

    def _validate(self, req: h11.Request) -> Request:
        headers = list(req.headers)
        if req.method != b"GET":
            raise _reject(405, "the opening handshake must be a GET", [(b"allow", b"GET")])
        upgrade_required = [(b"upgrade", b"websocket"), (b"sec-websocket-version", b"13")]
        connection = {t.lower() for t in _tokens(headers, b"connection")}
        upgrade = {t.lower() for t in _tokens(headers, b"upgrade")}
        if "upgrade" not in connection or "websocket" not in upgrade or req.http_version != b"1.1":
            raise _reject(426, "this endpoint only speaks WebSocket", upgrade_required)
        if _values(headers, b"sec-websocket-version") != [b"13"]:
            raise _reject(426, "unsupported Sec-WebSocket-Version (13 expected)", upgrade_required)
        keys = _values(headers, b"sec-websocket-key")
        try:
            if len(keys) != 1 or len(base64.b64decode(keys[0], validate=True)) != 16:
                raise ValueError
        except ValueError:
            raise _reject(400, "missing or malformed Sec-WebSocket-Key") from None
        self._key = keys[0].strip()
        origins = _values(headers, b"origin")
        origin = origins[0].decode("latin-1") if origins else None
        if self._origin_check is not None and not self._origin_check(origin):
            raise _reject(403, "origin not allowed")
        extensions = _tokens_items(headers)
        if self._deflate is not None:
            self._negotiated = server_negotiate(extensions, self._deflate)
        host = _values(headers, b"host")
        return Request(
            host=host[0].decode("latin-1") if host else "",
            path=req.target.decode("latin-1"),
            subprotocols=_tokens(headers, b"sec-websocket-protocol"),
            extensions=extensions,
            headers=headers,
            origin=origin,
        )

    def accept(self, event: AcceptConnection, offered: list[str]) -> tuple[bytes, PerMessageDeflate | None]:
        """The 101 response, and the permessage-deflate parameters now in force."""
        headers = [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
                   (b"sec-websocket-accept", accept_key(self._key))]
        if event.subprotocol is not None:
            if event.subprotocol not in offered:
                raise LocalProtocolError(f"subprotocol {event.subprotocol!r} was not offered")
            headers.append((b"sec-websocket-protocol", event.subprotocol.encode("latin-1")))
        agreed = None
        if event.extensions is None and self._negotiated is not None:
            item, agreed = self._negotiated
            headers.append((b"sec-websocket-extensions", item.encode("latin-1")))
        elif event.extensions:
            raise LocalProtocolError("extensions: pass None (accept what was negotiated) or [] (decline)")
        headers += _extra(event.headers)
        try:
            data = self._h11.send(
                h11.InformationalResponse(status_code=101, headers=headers, reason=b"Switching Protocols"))
        except h11.LocalProtocolError as exc:
            raise LocalProtocolError(str(exc)) from None
        return data or b"", agreed

    def reject(self, event: RejectConnection) -> bytes:
        if not 400 <= event.status <= 599 and not 300 <= event.status <= 399:
            raise LocalProtocolError("a rejection needs a 3xx, 4xx or 5xx status")
        headers = list(event.headers)
        names = {name.lower() for name, _ in headers}
        if names & {b"content-length", b"transfer-encoding"}:
            raise LocalProtocolError("the rejection body length is set by wsframe")
        headers.append((b"content-length", str(len(event.body)).encode()))
        if b"connection" not in names:
            headers.append((b"connection", b"close"))
        if event.body and b"content-type" not in names:
            headers.append((b"content-type", b"text/plain; charset=utf-8"))
        reason = _phrase(event.status)
        try:
            out = self._h11.send(h11.Response(status_code=event.status, headers=headers, reason=reason)) or b""
            if event.body:
                out += self._h11.send(h11.Data(data=event.body)) or b""
            out += self._h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise LocalProtocolError(str(exc)) from None
        return out

    def trailing_data(self) -> bytes:
        return bytes(self._h11.trailing_data[0])


def _tokens_items(headers: list[tuple[bytes, bytes]]) -> list[str]:
    return [item for value in _values(headers, b"sec-websocket-extensions")
            for item in parse_extension_items(value.decode("latin-1"))]


def _host_bytes(host: str) -> bytes:
    if host.isascii():
        return host.encode("ascii")
    try:
        return host.encode("idna")  # internationalised names go out as punycode
    except UnicodeError:
        raise LocalProtocolError(f"cannot encode host {host!r}") from None


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class ClientHandshake:
    """Writes the upgrade request; reads the 101 (checked) or a rejection (body included)."""

    __slots__ = ("_body", "_deflate", "_eof", "_h11", "_key", "_max_body", "_protocols", "_reject")

    def __init__(self, *, max_size: int, deflate: PerMessageDeflate | None) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_size)
        self._max_body = max_size
        self._deflate = deflate
        self._key = b""
        self._protocols: list[str] = []
        self._reject: h11.Response | None = None
        self._body = bytearray()
        self._eof = False

    def request(self, event: Request, nonce: bytes) -> bytes:
        if event.extensions:
            raise LocalProtocolError("configure permessage_deflate on the Connection, not Request.extensions")
        for proto in event.subprotocols:
            if not _TOKEN.fullmatch(proto):
                raise LocalProtocolError(f"subprotocol {proto!r} is not an HTTP token")
        self._key = base64.b64encode(nonce)
        self._protocols = list(event.subprotocols)
        headers = [
            (b"host", _host_bytes(event.host)),
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-key", self._key),
            (b"sec-websocket-version", b"13"),
        ]
        if event.subprotocols:
            headers.append((b"sec-websocket-protocol", ", ".join(event.subprotocols).encode("latin-1")))
        if self._deflate is not None:
            headers.append((b"sec-websocket-extensions", client_offer(self._deflate).encode("latin-1")))
        if event.origin is not None:
            headers.append((b"origin", event.origin.encode("latin-1")))
        headers += _extra(event.headers)
        try:
            req = h11.Request(method=b"GET", target=event.path.encode("latin-1"), headers=headers)
            return (self._h11.send(req) or b"") + (self._h11.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            raise LocalProtocolError(str(exc)) from None

    def receive_data(self, data: bytes) -> None:
        self._eof = not data
        self._h11.receive_data(data)

    def next_response(self) -> tuple[AcceptConnection, PerMessageDeflate | None] | RejectConnection | None:
        """(AcceptConnection, agreed deflate) or a complete RejectConnection; None: need data.

        EOF before a 101 or a complete rejection raises EOFError."""
        conn = self._h11
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self._eof:
                    raise EOFError from None  # the connection died mid-response
                raise RemoteProtocolError(f"bad HTTP response: {exc}") from None
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.ConnectionClosed):
                raise EOFError
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    return self._validate(list(event.headers))
                continue  # 1xx interim responses carry nothing for us
            if isinstance(event, h11.Response):
                self._reject = event
            elif isinstance(event, h11.Data):
                raw: Any = event  # h11 types .data bytes but hands a bytearray (mypyc checks a typed read)
                self._body += raw.data
                if len(self._body) > self._max_body:
                    raise RemoteProtocolError("rejection body over the handshake size limit")
            elif isinstance(event, h11.EndOfMessage):
                assert self._reject is not None
                return RejectConnection(self._reject.status_code, list(self._reject.headers), bytes(self._body))

    def _validate(self, headers: list[tuple[bytes, bytes]]) -> tuple[AcceptConnection, PerMessageDeflate | None]:
        if "websocket" not in {t.lower() for t in _tokens(headers, b"upgrade")}:
            raise RemoteProtocolError("101 without Upgrade: websocket")
        if "upgrade" not in {t.lower() for t in _tokens(headers, b"connection")}:
            raise RemoteProtocolError("101 without Connection: Upgrade")
        if _values(headers, b"sec-websocket-accept") != [accept_key(self._key)]:
            raise RemoteProtocolError("wrong Sec-WebSocket-Accept")
        protocols = _tokens(headers, b"sec-websocket-protocol")
        if len(protocols) > 1 or (protocols and protocols[0] not in self._protocols):
            raise RemoteProtocolError(f"server chose a subprotocol we did not offer: {protocols!r}")
        items = _tokens_items(headers)
        try:
            agreed = client_accept(items, self._deflate) if self._deflate is not None else None
            if items and self._deflate is None:
                raise ValueError("server accepted an extension we did not offer")
        except ValueError as exc:
            raise RemoteProtocolError(str(exc)) from None
        return AcceptConnection(protocols[0] if protocols else None, items, headers), agreed

    def trailing_data(self) -> bytes:
        return bytes(self._h11.trailing_data[0])
