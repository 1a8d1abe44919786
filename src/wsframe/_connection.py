"""The sans-IO WebSocket connection: bytes in, events out, bytes back."""
from __future__ import annotations

import os
from collections.abc import Callable

from ._buffer import ReceiveBuffer
from ._deflate import Deflater, Inflater, PerMessageDeflate
from ._errors import INTERNAL_ERRORS, LocalProtocolError, RemoteProtocolError
from ._events import (
    NEED_DATA,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    CloseReason,
    Event,
    NeedData,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)
from ._handshake import ClientHandshake, ServerHandshake
from ._readers import FrameReader, MessageReader
from ._state import CLIENT, SERVER, ConnectionState, Role, next_state
from ._writers import FrameWriter

__all__ = ["Connection"]

S = ConnectionState
_RECEIVING = frozenset({S.OPEN, S.CLIENT_CLOSING, S.SERVER_CLOSING})
_DONE = frozenset({S.CLOSED, S.FAILED, S.HANDSHAKE_FAILED})
_DEFAULT_DEFLATE = PerMessageDeflate()  # frozen: one shared default offer


class Connection:
    """One WebSocket connection, either role.

    Limits: ``max_frame_size`` caps one frame's payload on the wire, ``max_message_size``
    a (decompressed) message; both breaches are RemoteProtocolError with a 1009 hint.
    ``max_handshake_size`` caps the HTTP head (and a rejection body on the client).
    ``permessage_deflate``: what we accept (server) or offer (client); None disables it.
    ``deliver_fragments``: emit each data frame as it arrives (``message_finished`` marks
    the last) instead of whole messages. ``origin_check(origin) -> bool`` (server) turns
    a False into a 403 rejection. ``rng(n) -> bytes`` supplies the client's key and masks.
    ``handshake=False`` starts OPEN (the handshake happened elsewhere); then
    ``permessage_deflate`` is taken as the already agreed parameters.
    """

    __slots__ = (
        "_buf",
        "_eof",
        "_error",
        "_fragments",
        "_hs_client",
        "_hs_server",
        "_max_frame",
        "_max_message",
        "_messages",
        "_offered_protocols",
        "_peer",
        "_reader",
        "_rng",
        "_state",
        "_writer",
        "extension",
        "our_role",
        "subprotocol",
    )

    def __init__(
        self,
        role: Role,
        *,
        max_frame_size: int = 16 * 1024 * 1024,
        max_message_size: int = 16 * 1024 * 1024,
        max_handshake_size: int = 64 * 1024,
        permessage_deflate: PerMessageDeflate | None = _DEFAULT_DEFLATE,
        deliver_fragments: bool = False,
        origin_check: Callable[[str | None], bool] | None = None,
        rng: Callable[[int], bytes] = os.urandom,
        handshake: bool = True,
    ) -> None:
        self.our_role = role
        self._peer = SERVER if role is CLIENT else CLIENT
        self._max_frame = max_frame_size
        self._max_message = max_message_size
        self._fragments = deliver_fragments
        self._rng = rng
        self._error: RemoteProtocolError | None = None
        self._eof = False
        self._buf = ReceiveBuffer()
        self._hs_server: ServerHandshake | None = None
        self._hs_client: ClientHandshake | None = None
        self._offered_protocols: list[str] = []
        self._reader: FrameReader | None = None
        self._messages: MessageReader | None = None
        self._writer: FrameWriter | None = None
        # public: the permessage-deflate parameters in force once open (None: not negotiated)
        self.extension: PerMessageDeflate | None = None
        # public: the agreed subprotocol once open
        self.subprotocol: str | None = None
        if not handshake:
            self._state = S.OPEN
            self._open(permessage_deflate)
        elif role is SERVER:
            self._state = S.IDLE
            self._hs_server = ServerHandshake(
                max_size=max_handshake_size, deflate=permessage_deflate, origin_check=origin_check
            )
        else:
            self._state = S.IDLE
            self._hs_client = ClientHandshake(max_size=max_handshake_size, deflate=permessage_deflate)

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def their_role(self) -> Role:
        return self._peer

    @property
    def role(self) -> Role:
        """Alias of ``our_role`` (the name before the codecs agreed on h11's)."""
        return self.our_role

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """Unparsed bytes and whether EOF was seen (like h11); during the opening handshake, the
        request received so far."""
        hs = self._hs_server
        if hs is not None and self._state is S.IDLE:
            return hs.trailing_data(), self._eof
        return bytes(memoryview(self._buf.data)[self._buf.pos:]), self._eof

    @property
    def buffered_bytes(self) -> int:
        """Received bytes held: not parsed yet (a frame still arriving), or the parts of a
        fragmented message so far; during the opening handshake, the request received so far."""
        messages = self._messages
        if messages is None:
            hs = self._hs_server
            return hs.buffered_bytes() if hs is not None and self._state is S.IDLE else 0
        return len(self._buf) + messages.assembling

    def set_limits(self, *, max_frame_size: int, max_message_size: int) -> None:
        """Change the frame and message caps from the next frame on (a server raising them once
        the peer has logged in, say)."""
        self._max_frame = max_frame_size
        self._max_message = max_message_size
        if self._reader is not None and self._messages is not None:
            self._reader.set_max_frame_size(max_frame_size)
            self._messages.set_max_message_size(max_message_size)

    # -- receiving ----------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the peer; ``b""`` means EOF. Never parses."""
        if self._eof:
            if data:
                raise LocalProtocolError("data received after EOF")
            return
        if self._state in _DONE:
            return  # nothing more will be parsed; do not let the peer fill memory
        if not data:
            self._eof = True
            if self._hs_client is not None:
                self._hs_client.receive_data(b"")  # a rejection body may end at EOF
            return
        if self._hs_server is not None:
            self._hs_server.receive_data(bytes(data))
        elif self._hs_client is not None:
            self._hs_client.receive_data(bytes(data))
        else:
            self._buf.feed(data)

    def next_event(self) -> Event | NeedData:
        """The next event, or NEED_DATA. Only RemoteProtocolError escapes; after one, the
        same error is raised again and only its ``hint`` may still be sent."""
        if self._error is not None:
            raise self._error.detached()  # a fresh copy each time: the kept one has no traceback
        try:
            event = self._next()
        except RemoteProtocolError as exc:
            self._failed(exc)
            raise
        except INTERNAL_ERRORS as bug:  # a bug of ours: the peer gets 1011 (or a 500), the caller no crash
            err = RemoteProtocolError(f"internal error: {bug!r}", self._internal_error_hint())
            self._failed(err)
            raise err from bug
        return event

    def _failed(self, exc: RemoteProtocolError) -> None:
        self._error = exc.detached()
        self._state = S.HANDSHAKE_FAILED if self._writer is None else S.FAILED

    def _internal_error_hint(self) -> CloseConnection | RejectConnection | None:
        if self._writer is not None:
            return CloseConnection(CloseReason.INTERNAL_ERROR, "internal error")
        return RejectConnection(500) if self.our_role is SERVER else None

    def _next(self) -> Event | NeedData:
        state = self._state
        if state in _RECEIVING:
            return self._next_frame_event()
        if self._hs_server is not None and state is S.IDLE:
            return self._next_request()
        if self._hs_client is not None and state is S.HANDSHAKE:
            return self._next_response()
        return self._at_eof()

    def _next_frame_event(self) -> Event | NeedData:
        reader, messages = self._reader, self._messages
        assert reader is not None and messages is not None
        while True:
            frame = reader.next_frame()
            if frame is None:
                return self._at_eof()
            event = messages.frame(*frame)
            if event is None:
                continue
            if isinstance(event, CloseConnection):
                self._transition(self._peer, event)
            elif next_state(self._peer, self._state, type(event)) is None:
                raise RemoteProtocolError(
                    f"{type(event).__name__} after the peer's Close",
                    hint=CloseConnection(CloseReason.PROTOCOL_ERROR, "data after close"),
                )
            return event

    def _at_eof(self) -> Event | NeedData:
        if not self._eof or self._state is S.CLOSED:
            return NEED_DATA
        self._state = S.CLOSED
        return CloseConnection(CloseReason.ABNORMAL_CLOSURE, "connection lost without a Close frame")

    def _next_request(self) -> Event | NeedData:
        hs = self._hs_server
        assert hs is not None
        request = hs.next_request()
        if request is None:
            return self._at_eof()
        self._transition(CLIENT, request)
        self._offered_protocols = request.subprotocols
        return request

    def _next_response(self) -> Event | NeedData:
        hs = self._hs_client
        assert hs is not None
        try:
            result = hs.next_response()
        except EOFError:
            return self._at_eof()
        if result is None:
            return self._at_eof()
        if isinstance(result, RejectConnection):
            self._transition(SERVER, result)
            return result
        accept, agreed = result
        self._transition(SERVER, accept)
        self.subprotocol = accept.subprotocol
        trailing = hs.trailing_data()
        self._hs_client = None
        self._open(agreed)
        if trailing:
            self._buf.feed(trailing)
        return accept

    def _open(self, agreed: PerMessageDeflate | None) -> None:
        """Switch to framing with the negotiated permessage-deflate parameters."""
        self.extension = agreed
        client = self.our_role is CLIENT
        inflater = deflater = None
        if agreed is not None:
            # each side compresses with its own window and context-takeover setting
            ours_bits = agreed.client_max_window_bits if client else agreed.server_max_window_bits
            ours_reset = agreed.client_no_context_takeover if client else agreed.server_no_context_takeover
            theirs_reset = agreed.server_no_context_takeover if client else agreed.client_no_context_takeover
            deflater = Deflater(ours_bits, ours_reset)
            inflater = Inflater(theirs_reset)
        self._reader = FrameReader(
            self._buf, expect_mask=not client, max_frame_size=self._max_frame, rsv1_ok=agreed is not None
        )
        self._messages = MessageReader(
            max_message_size=self._max_message, inflater=inflater, deliver_fragments=self._fragments
        )
        rng = self._rng
        self._writer = FrameWriter(mask_key=(lambda: rng(4)) if client else None, deflater=deflater)

    # -- sending ------------------------------------------------------------------------

    def send(self, event: Event) -> bytes:
        """Validate ``event`` against the state and serialise it."""
        new_state = next_state(self.our_role, self._state, type(event))
        if new_state is None:
            raise LocalProtocolError(
                f"cannot send {type(event).__name__} in state {self._state.value} as {self.our_role.value}"
            )
        writer = self._writer
        if isinstance(event, TextMessage):
            assert writer is not None
            if not isinstance(event.data, str):
                raise LocalProtocolError("TextMessage.data must be str")
            data = writer.message(event.data.encode("utf-8"), True, event.message_finished)
        elif isinstance(event, BytesMessage):
            assert writer is not None
            if not isinstance(event.data, (bytes, bytearray, memoryview)):
                raise LocalProtocolError("BytesMessage.data must be bytes")
            data = writer.message(bytes(event.data), False, event.message_finished)
        elif isinstance(event, Ping):
            assert writer is not None
            data = writer.ping(event.payload)
        elif isinstance(event, Pong):
            assert writer is not None
            data = writer.pong(event.payload)
        elif isinstance(event, CloseConnection):
            assert writer is not None
            data = writer.close(event.code, event.reason)
        elif isinstance(event, Request):
            assert self._hs_client is not None
            data = self._hs_client.request(event, self._rng(16))
        elif isinstance(event, AcceptConnection):
            assert self._hs_server is not None
            data, agreed = self._hs_server.accept(event, self._offered_protocols)
            trailing = self._hs_server.trailing_data()
            self._hs_server = None
            self.subprotocol = event.subprotocol
            self._open(agreed)
            if trailing:
                self._buf.feed(trailing)
        else:
            # the table lets only RejectConnection through to here
            assert isinstance(event, RejectConnection) and self._hs_server is not None
            data = self._hs_server.reject(event)
        self._state = new_state
        return data

    def _transition(self, sender: Role, event: Event) -> None:
        """Apply a received event to the table; the peer broke the protocol if it is missing."""
        new_state = next_state(sender, self._state, type(event))
        if new_state is None:
            raise RemoteProtocolError(
                f"unexpected {type(event).__name__} in state {self._state.value}",
                hint=CloseConnection(CloseReason.PROTOCOL_ERROR, "unexpected frame"),
            )
        self._state = new_state
