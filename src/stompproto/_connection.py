"""The sans-IO STOMP connection: bytes in, events out, events in, bytes out.

Decisions (see also _readers and _state):

* Version: the server negotiates it from CONNECT's ``accept-version`` (absent = "1.0")
  and ``versions``; ``conn.version`` is set as soon as the CONNECT is returned, so the
  caller can build the CONNECTED (``conn.connected_frame(...)``). The client learns it
  from CONNECTED's ``version`` (absent = "1.0"), which must be one it offered. Escaping
  and per-version header rules switch on only once CONNECTED has passed; the frames
  before that (CONNECT, CONNECTED, an ERROR rejecting the CONNECT) use CONNECT rules.
* Heart-beats: learnt when the CONNECT/CONNECTED pair has passed (either direction);
  ``negotiate_heartbeat`` is the spec's formula. Liveness is refreshed by every
  ``receive_data(data, now)``; our send deadline by every ``send(..., now)``.
  ``HeartbeatDue`` is queued at most once per send period; ``PeerTimedOut`` once per
  silence (re-armed when data arrives).
* After the client's DISCONNECT the server may still send RECEIPT/MESSAGE/ERROR; a
  client frame after DISCONNECT is a protocol error (EOL heart-beats are fine).
  After an ERROR nothing may be sent and any further peer frame is an error.
  EOF at a frame boundary gives one ``ConnectionClosed`` (then ``NEED_DATA``);
  EOF inside a frame is a RemoteProtocolError.
* ``max_connect_frame_size`` caps every frame (and body) until CONNECTED has passed, so a peer
  that has not logged in cannot make the connection buffer a full-size frame; the other limits
  apply from then on.
* Once a RemoteProtocolError was raised, ``next_event`` raises it again (a fresh copy: no
  traceback is kept, see ``detached``); ``send`` still works so the server can send ``exc.hint``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ._buffer import ReceiveBuffer
from ._errors import INTERNAL_ERRORS, LocalProtocolError, RemoteProtocolError
from ._events import (
    NEED_DATA,
    Connect,
    Connected,
    ConnectionClosed,
    Error,
    Event,
    Frame,
    Heartbeat,
    HeartbeatDue,
    Message,
    NeedData,
    PeerTimedOut,
    Unsubscribe,
)
from ._readers import FrameReader
from ._state import (
    ALLOWED,
    BODY_ALLOWED,
    CLIENT,
    REQUIRED_HEADERS,
    SERVER,
    VERSION_MIN,
    Role,
    State,
)
from ._writers import HEARTBEAT_BYTES, encode_headers, message_tail, serialize

__all__ = [
    "Connection", "NEED_DATA", "SUPPORTED_VERSIONS", "negotiate_heartbeat",
    "negotiate_version", "parse_heartbeat",
]

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0", "1.1", "1.2")


_HEARTBEAT_RE = re.compile(r"\s*([0-9]+)\s*,\s*([0-9]+)\s*\Z")


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """``"cx,cy"`` -> ``(cx, cy)``; None (header absent) -> ``(0, 0)``. ValueError if malformed."""
    if value is None:
        return (0, 0)
    m = _HEARTBEAT_RE.match(value)
    if m is None:
        raise ValueError(f"malformed heart-beat header {value[:32]!r}")
    return (int(m.group(1)), int(m.group(2)))


def negotiate_heartbeat(
    connect: tuple[int, int], connected: tuple[int, int]
) -> tuple[int, int]:
    """Spec "Heart-beating": from CONNECT's (cx, cy) and CONNECTED's (sx, sy) return
    (client-to-server period, server-to-client period) in ms, 0 meaning none."""
    cx, cy = connect
    sx, sy = connected
    return (max(cx, sy) if cx and sy else 0, max(sx, cy) if sx and cy else 0)


def negotiate_version(accept_version: str | None, versions: Iterable[str]) -> str | None:
    """The highest version in both ``accept-version`` (absent = "1.0") and ``versions``."""
    offered = {"1.0"} if accept_version is None else {v.strip() for v in accept_version.split(",")}
    common = [v for v in SUPPORTED_VERSIONS if v in offered and v in versions]
    return common[-1] if common else None


def _rules_for(
    sender: Role, state: State, version: str
) -> dict[type[Frame], tuple[State, tuple[str, ...] | None]]:
    """The ``ALLOWED`` slice for (sender, state) joined with the headers each frame must carry in
    ``version``: ``{frame class: (new state, required header names)}``, the names None for the
    frames with rules of their own (CONNECT, CONNECTED, 1.0's UNSUBSCRIBE, a frame the version
    lacks), which go through ``_check_headers``."""
    rules: dict[type[Frame], tuple[State, tuple[str, ...] | None]] = {}
    for cls, new in ALLOWED[(sender, state)].items():
        special = cls in (Connect, Connected, Unsubscribe) or (
            cls in VERSION_MIN and version < VERSION_MIN[cls]
        )
        rules[cls] = (new, None if special else REQUIRED_HEADERS[(cls, version)])
    return rules


# Every (sender, state, version) built once at import (30 small dicts), shared by all connections.
_RULES: dict[tuple[Role, State, str], dict[type[Frame], tuple[State, tuple[str, ...] | None]]] = {
    (sender, state, version): _rules_for(sender, state, version)
    for sender in Role
    for state in State
    for version in SUPPORTED_VERSIONS
}


class Connection:
    """One STOMP connection in the CLIENT or SERVER role. Never does I/O, never reads a clock."""

    def __init__(
        self,
        role: Role,
        *,
        max_frame_size: int = 16 * 1024 * 1024 + 65536,
        max_header_count: int = 256,
        max_header_line: int = 16 * 1024,
        max_body_size: int = 16 * 1024 * 1024,
        heartbeat_grace: float = 1.5,
        versions: Iterable[str] = SUPPORTED_VERSIONS,
        max_connect_frame_size: int | None = None,
    ) -> None:
        if not isinstance(role, Role):
            raise TypeError("role must be CLIENT or SERVER")
        versions = tuple(versions)
        if not versions or any(v not in SUPPORTED_VERSIONS for v in versions):
            raise ValueError(f"versions must be a non-empty subset of {SUPPORTED_VERSIONS}")
        self._role = role
        self._peer = role.peer
        self.versions = tuple(v for v in SUPPORTED_VERSIONS if v in versions)
        self.heartbeat_grace = heartbeat_grace
        self._wire_version: str | None = None  # escaping/header rules: set once CONNECTED passed
        self._set_state(State.AWAIT_CONNECT)
        self._buf = ReceiveBuffer()
        #: the frame and body caps once CONNECTED has passed (before: max_connect_frame_size)
        self._open_limits = (max_frame_size, max_body_size)
        if max_connect_frame_size is not None:
            max_frame_size = min(max_frame_size, max_connect_frame_size)
            max_body_size = min(max_body_size, max_connect_frame_size)
        self._reader = FrameReader(
            self._buf, max_frame_size=max_frame_size, max_header_count=max_header_count,
            max_header_line=max_header_line, max_body_size=max_body_size,
        )
        #: timer events waiting for next_event: at most two, so a list (a deque is ~600 bytes)
        self._events: list[Event] = []
        self._error: RemoteProtocolError | None = None
        self._eof = False
        self._closed_reported = False
        self._version: str | None = None       # negotiated (server: from CONNECT)
        self._offered: tuple[str, ...] = ()    # client: versions our CONNECT offered
        self._connect_hb = (0, 0)
        self._hb = (0, 0)
        self._last_sent: float | None = None
        self._last_recv: float | None = None
        self._send_deadline: float | None = None
        self._recv_deadline: float | None = None

    # -- read-only state -------------------------------------------------------------

    @property
    def our_role(self) -> Role:
        return self._role

    @property
    def their_role(self) -> Role:
        return self._peer

    @property
    def role(self) -> Role:
        """Alias of ``our_role`` (the name before the codecs agreed on h11's)."""
        return self._role

    @property
    def state(self) -> State:
        return self._state

    @property
    def version(self) -> str | None:
        return self._version

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not parsed into events yet (a frame still arriving, say)."""
        return len(self._buf)

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """Unparsed bytes and whether EOF was seen (like h11)."""
        return bytes(memoryview(self._buf.data)[self._buf.pos:]), self._eof

    @property
    def heartbeat(self) -> tuple[int, int]:
        """Negotiated (send_every_ms, expect_every_ms) for our side; (0, 0) = off."""
        return self._hb

    # -- receiving ---------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float | None = None) -> None:
        """Buffer bytes from the peer (``b""`` = EOF). ``now`` refreshes the peer's liveness."""
        if self._eof:
            raise LocalProtocolError("receive_data after EOF")
        if not data:
            self._eof = True
            return
        self._buf.feed(data)
        if now is not None:
            self._last_recv = now
            if self._hb[1]:
                self._recv_deadline = now + self._hb[1] / 1000 * self.heartbeat_grace

    def next_event(self) -> Event | NeedData:
        """The next event, or NEED_DATA. Only RemoteProtocolError may escape."""
        if self._events:
            return self._events.pop(0)
        if self._error is not None:
            raise self._error.detached()
        try:
            ev = self._reader.next(self._wire_version)
            if ev is None:
                if not self._eof:
                    return NEED_DATA
                if self._reader.mid_frame():
                    raise RemoteProtocolError("connection closed in the middle of a frame")
                if self._closed_reported:
                    return NEED_DATA
                self._closed_reported = True
                self._set_state(State.CLOSED)
                return ConnectionClosed()
            if type(ev) is Heartbeat:
                return ev
            self._received(ev)  # type: ignore[arg-type]
            return ev
        except RemoteProtocolError as exc:
            if exc.hint is None:
                exc.hint = self._hint(str(exc), self._reader.headers)
            self._error = exc.detached()
            raise
        except INTERNAL_ERRORS as bug:  # a bug of ours: the peer gets an ERROR, the caller no crash
            err = RemoteProtocolError(f"internal error: {bug!r}")
            err.hint = self._hint("internal error", None)
            self._error = err.detached()
            raise err from bug

    def _received(self, frame: Frame) -> None:
        cls = type(frame)
        rule = self._recv_rules.get(cls)
        if rule is None:
            raise RemoteProtocolError(
                f"{frame.command} not allowed from the {self._peer.value} "
                f"in state {self._state.value}"
            )
        new, required = rule
        if required is None:  # a frame with rules of its own (see _rules_for)
            problem = self._check_headers(frame)
            if problem:
                raise RemoteProtocolError(problem)
            if cls is Connect:
                self._on_connect(frame, RemoteProtocolError)  # type: ignore[arg-type]
            elif cls is Connected:
                self._on_connected(frame, RemoteProtocolError)
        else:
            headers = frame.headers
            for name in required:
                if name not in headers:
                    raise RemoteProtocolError(self._check_headers(frame) or "missing header")
        if new is not self._state:
            self._set_state(new)

    # -- sending -------------------------------------------------------------------------

    def send(self, event: Event, now: float | None = None) -> bytes:
        """Validate ``event`` against role, state and version and return its bytes."""
        if type(event) is Heartbeat:
            if self._state is State.CLOSED:
                raise LocalProtocolError("cannot send after the connection closed")
            data = HEARTBEAT_BYTES
        else:
            if not isinstance(event, Frame):
                raise LocalProtocolError(f"{type(event).__name__} cannot be sent")
            cls = type(event)
            new = self._send_allowed.get(cls)
            if new is None:
                raise LocalProtocolError(
                    f"{cls.command or cls.__name__} not allowed from the "
                    f"{self._role.value} in state {self._state.value}"
                )
            problem = self._check_headers(event)
            if problem:
                raise LocalProtocolError(problem)
            if event.body and cls not in BODY_ALLOWED:
                raise LocalProtocolError(f"{cls.command} frames must not have a body")
            data = serialize(event, self._wire_version if self._wire_version != "1.0" else None)
            if cls is Connect:
                self._on_connect(event, LocalProtocolError)  # type: ignore[arg-type]
            elif cls is Connected:
                self._on_connected(event, LocalProtocolError)
            if new is not self._state:
                self._set_state(new)
        if now is not None:
            self._last_sent = now
            if self._hb[0]:
                self._send_deadline = now + self._hb[0] / 1000
        return data

    # -- pre-encoded MESSAGE frames (servers fanning one message out) ---------------------------

    @property
    def escape(self) -> str | None:
        """The header escaping of frames sent now: "1.1", "1.2" or None (1.0, or CONNECTED has not
        passed yet). Pre-encoded parts are only valid for connections with the same value."""
        v = self._wire_version
        return None if v == "1.0" else v

    def encode_headers(self, headers: dict[str, str]) -> bytes:
        """``headers`` as encoded header lines (``b"name:value\\n"`` each) under this connection's
        escaping; LocalProtocolError for what it cannot carry."""
        try:
            return encode_headers(headers, self.escape).encode()
        except UnicodeEncodeError:
            raise LocalProtocolError("header is not encodable as UTF-8") from None

    def message_tail(self, headers: dict[str, str], body: bytes) -> bytes:
        """The last headers of a MESSAGE, then its ``content-length``, blank line, body and NUL.
        ``b"MESSAGE\\n" + encode_headers(first) + message_tail(rest, body)`` is exactly what
        ``send(Message({**first, **rest, "content-length": ...}, body))`` returns."""
        return message_tail(headers, body, self.escape)

    def send_message_bytes(self, data: bytes, now: float | None = None) -> bytes:
        """Send a MESSAGE assembled from the pre-encoded parts above, trusting the caller that it
        has ``destination``, ``message-id`` and ``subscription``: only the state is checked (no
        header validation, no re-encoding). Returns ``data``."""
        if Message not in self._send_allowed:
            raise LocalProtocolError(
                f"MESSAGE not allowed from the {self._role.value} in state {self._state.value}"
            )
        if now is not None:
            self._last_sent = now
            if self._hb[0]:
                self._send_deadline = now + self._hb[0] / 1000
        return data

    def connected_frame(
        self, heart_beat: tuple[int, int] | None = None, headers: dict[str, str] | None = None
    ) -> Connected:
        """Server helper: the CONNECTED answering the received CONNECT, carrying the
        negotiated ``version`` and, if given, ``heart-beat:sx,sy`` plus extra ``headers``."""
        if self._role is not SERVER or self._state is not State.CONNECTING:
            raise LocalProtocolError("connected_frame() needs a server that received CONNECT")
        h: dict[str, str] = {"version": self._version or "1.0"}
        if heart_beat is not None:
            h["heart-beat"] = f"{int(heart_beat[0])},{int(heart_beat[1])}"
        if headers:
            h.update(headers)
        return Connected(h)

    # -- timers --------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """Absolute deadline of the next heart-beat duty (send or liveness check), or None."""
        if self._state is State.CLOSED:
            return None
        s, r = self._send_deadline, self._recv_deadline
        if s is None:
            return r
        if r is None:
            return s
        return s if s < r else r

    def handle_timer(self, now: float) -> None:
        """Queue HeartbeatDue / PeerTimedOut for every deadline at or before ``now``."""
        if self._state is State.CLOSED:
            return
        if self._send_deadline is not None and now >= self._send_deadline:
            self._events.append(HeartbeatDue())
            self._send_deadline = now + self._hb[0] / 1000  # once per due period
        if self._recv_deadline is not None and now >= self._recv_deadline:
            self._events.append(PeerTimedOut())
            self._recv_deadline = None  # re-armed by the next receive_data(now=...)

    def _set_state(self, state: State) -> None:
        self._state = state
        self._send_allowed = ALLOWED[(self._role, state)]
        self._recv_rules = _RULES[(self._peer, state, self._wire_version or "1.0")]

    # -- per-frame rules -----------------------------------------------------------------

    def _check_headers(self, frame: Frame) -> str | None:
        """Version-specific frame/header presence rules; a description of the problem or None."""
        cls = type(frame)
        version = self._wire_version or "1.0"
        if cls in VERSION_MIN and version < VERSION_MIN[cls]:
            return f"{cls.command} does not exist in STOMP {version}"
        headers = frame.headers
        for name in REQUIRED_HEADERS[(cls, version)]:
            if name not in headers:
                return f"{cls.command} requires the {name!r} header in STOMP {version}"
        if cls is Unsubscribe and version == "1.0":
            if "id" not in headers and "destination" not in headers:
                return "UNSUBSCRIBE requires an 'id' or 'destination' header"
        return None

    def _on_connect(self, frame: Connect, err: type[Exception]) -> None:
        headers = frame.headers
        try:
            hb = parse_heartbeat(headers.get("heart-beat"))
        except ValueError as exc:
            raise err(str(exc)) from None
        accept = headers.get("accept-version")
        if self._role is SERVER:  # received
            version = negotiate_version(accept, self.versions)
            if version is None:
                supported = ",".join(self.versions)
                raise RemoteProtocolError(
                    f"no common protocol version (client accepts {accept!r})",
                    hint=Error(
                        {
                            "version": supported,
                            "content-type": "text/plain",
                            "message": "Supported protocol versions are " + " ".join(self.versions),
                        },
                        ("Supported protocol versions are " + " ".join(self.versions)).encode(),
                    ),
                )
            self._version = version
        else:  # sent
            offered = ("1.0",) if accept is None else tuple(
                v for v in SUPPORTED_VERSIONS
                if v in {x.strip() for x in accept.split(",")} and v in self.versions
            )
            if not offered or (accept is None and "1.0" not in self.versions):
                raise LocalProtocolError(
                    f"accept-version {accept!r} offers none of {self.versions}"
                )
            if "host" not in headers and offered != ("1.0",):
                # required from 1.1; we accept it missing (like RabbitMQ) but never omit it
                raise LocalProtocolError("CONNECT requires the 'host' header from STOMP 1.1")
            self._offered = offered
        self._connect_hb = hb

    def _on_connected(self, frame: Frame, err: type[Exception]) -> None:
        headers = frame.headers
        try:
            hb = parse_heartbeat(headers.get("heart-beat"))
        except ValueError as exc:
            raise err(str(exc)) from None
        given = headers.get("version")
        if self._role is CLIENT:  # received
            version = given if given is not None else "1.0"
            if version not in self._offered:
                raise RemoteProtocolError(
                    f"server chose version {version!r}, we offered {','.join(self._offered)}"
                )
            self._version = version
        else:  # sent
            version = self._version or "1.0"
            if given != version and not (given is None and version == "1.0"):
                raise LocalProtocolError(
                    f"CONNECTED must carry version:{version} (got {given!r})"
                )
        self._wire_version = version
        self._reader.set_size_limits(*self._open_limits)
        self._recv_rules = _RULES[(self._peer, self._state, version)]
        c2s, s2c = negotiate_heartbeat(self._connect_hb, hb)
        self._hb = (c2s, s2c) if self._role is CLIENT else (s2c, c2s)
        send_base = self._last_sent if self._last_sent is not None else self._last_recv
        recv_base = self._last_recv if self._last_recv is not None else self._last_sent
        if self._hb[0] and send_base is not None:
            self._send_deadline = send_base + self._hb[0] / 1000
        if self._hb[1] and recv_base is not None:
            self._recv_deadline = recv_base + self._hb[1] / 1000 * self.heartbeat_grace

    def _hint(self, message: str, headers: dict[str, str] | None) -> Error | None:
        """The ERROR a server should send before closing; None for clients or once closed."""
        if self._role is not SERVER or self._state is State.CLOSED:
            return None
        h = {"message": message}
        receipt = headers.get("receipt") if headers else None
        if receipt is not None and (
            self._wire_version == "1.2" or ("\r" not in receipt and "\n" not in receipt)
        ):
            h["receipt-id"] = receipt
        h["content-type"] = "text/plain"
        return Error(h, (message + "\n").encode())
