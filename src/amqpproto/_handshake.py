"""The connection's own methods on channel 0: the protocol header exchange, start/tune/open
negotiation (both roles' helpers and RabbitMQ's checks of a tune-ok) and the connection state
machine's transitions."""

from __future__ import annotations

from typing import Any

from . import _state as S
from . import spec
from ._base import NO_TUNE, ConnectionBase
from ._errors import LocalProtocolError, RemoteProtocolError
from ._events import NEED_DATA, ConnectionClosed, Event, NeedData, ProtocolHeader
from ._sasl import amqplain_response, plain_response
from ._state import SERVER, ConnectionState, Role

__all__ = ["Handshake"]

_HEADER = spec.PROTOCOL_HEADER


def _negotiate(a: int, b: int) -> int:
    # 0 means "no limit" for channel-max/frame-max and "off" for heartbeat (RabbitMQ's rule:
    # if either side says 0 take the other, else the smaller).
    return max(a, b) if a == 0 or b == 0 else min(a, b)


class Handshake(ConnectionBase):
    def start_ok(self, start: spec.ConnectionStart, user: str, password: str,
                 product: str) -> spec.ConnectionStartOk:
        """Client helper: the start-ok logging in as ``user`` with PLAIN (AMQPLAIN if the server
        offers only that), announcing the RabbitMQ capabilities a confirming consumer relies on."""
        mechs = bytes(start.mechanisms).split()
        if b"PLAIN" in mechs or not mechs:
            mech, response = "PLAIN", plain_response(user, password)
        else:
            mech, response = "AMQPLAIN", amqplain_response(user, password)
        props = {"product": product, "capabilities": {
            "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
            "authentication_failure_close": True}}  # a refused log-in is a connection.close 403
        return spec.ConnectionStartOk(props, mech, response, "en_US")

    def tune_ok(self, tune: spec.ConnectionTune) -> spec.ConnectionTuneOk:
        """Client helper: the tune-ok that negotiates the server's proposal with our limits."""
        return spec.ConnectionTuneOk(
            channel_max=_negotiate(tune.channel_max, self.config_channel_max),
            frame_max=_negotiate(tune.frame_max, self.config_frame_max),
            heartbeat=_negotiate(tune.heartbeat, self.config_heartbeat),
        )

    def tune(self) -> spec.ConnectionTune:
        """Server helper: the tune proposing our limits."""
        return spec.ConnectionTune(channel_max=self.config_channel_max,
                                   frame_max=self.config_frame_max,
                                   heartbeat=self.config_heartbeat)

    def _read_header(self, data: bytearray, pos: int, avail: int) -> Event | NeedData:
        got = bytes(data[pos:pos + 8])
        if not _HEADER.startswith(got):
            self._bad_header = True
            raise RemoteProtocolError(f"bad protocol header {got!r}", 0, ProtocolHeader(),
                                      fatal=True)
        if avail < 8:
            if self._eof:
                if avail:
                    raise self._hard(spec.FRAME_ERROR, "EOF inside the protocol header",
                                     fatal=True)
                return ConnectionClosed()
            return NEED_DATA
        self._buf.pos = pos + 8
        self.state = S.AWAIT_START
        return ProtocolHeader()

    def _server_header(self, data: bytearray, pos: int, avail: int) -> None:
        # 0x41 is no frame type: the server answered our header with its own, i.e. it does
        # not speak 0-9-1 (or it is not AMQP at all). Wait for all 8 bytes, then report.
        got = bytes(data[pos:pos + 8])
        if avail < 8 and not self._eof and b"AMQP".startswith(got[:4]):
            return
        raise RemoteProtocolError(f"server refused our protocol header, answered {got!r}",
                                  fatal=True)

    def _connection_transition(self, cls: Any, sender: Role, exc: type) -> None:
        self.state = self._connection_next(cls, sender, exc)

    def _connection_next(self, cls: Any, sender: Role, exc: type) -> ConnectionState:
        new = S.CONNECTION_TABLE.get((sender, self.state, cls))
        if new is None:
            name = getattr(cls, "NAME", cls.__name__)
            msg = f"{name} from the {sender.value} not allowed in state {self.state}"
            if exc is RemoteProtocolError:
                raise self._hard(spec.COMMAND_INVALID, msg, cls)
            raise LocalProtocolError(msg)
        return new

    def _after_connection_method(self, m: Any, sent: bool) -> None:
        cls = type(m)
        if cls is spec.ConnectionTune:
            self._tune = m
        elif cls is spec.ConnectionTuneOk:
            if not sent and self.our_role is SERVER:
                self._check_tune_ok(m)
            self._tune = NO_TUNE  # negotiated: the proposal is not needed any more
            self.frame_max = m.frame_max or self.config_frame_max
            self.channel_max = m.channel_max or 65535
            self.heartbeat = m.heartbeat
            self._send_max_payload = self.frame_max - 8
            self._recv_max_payload = max(self.frame_max, spec.FRAME_MIN_SIZE) - 8
        elif cls is spec.ConnectionCloseOk and self.state is S.CLOSED:
            self._channels.clear()

    def _check_tune_ok(self, m: spec.ConnectionTuneOk) -> None:
        # RabbitMQ's checks and texts; 0 ("no limit") exceeds any limit we proposed
        if m.frame_max and m.frame_max < spec.FRAME_MIN_SIZE:
            raise self._hard(spec.NOT_ALLOWED, f"negotiated frame_max = {m.frame_max} is lower than the "
                             f"minimum allowed value ({spec.FRAME_MIN_SIZE})", spec.ConnectionTuneOk)
        for field, ours, theirs in (("frame_max", self._tune.frame_max, m.frame_max),
                                    ("channel_max", self._tune.channel_max, m.channel_max)):
            if ours and (theirs == 0 or theirs > ours):
                detail = " (no limit)" if field == "channel_max" and theirs == 0 else ""
                raise self._hard(spec.NOT_ALLOWED, f"negotiated {field} = {theirs}{detail} is higher than "
                                 f"the maximum allowed value ({ours})", spec.ConnectionTuneOk)
