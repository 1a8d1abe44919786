"""What every part of the AMQP connection shares: its attributes (set by ``Connection.__init__``),
the per-channel record, and the protocol error the receive side raises.

The connection is made of one class per job: ``_handshake`` (protocol header, start/tune/open
negotiation), ``_channels`` (each channel's state machine), ``_receiving`` (frames in, events out:
content assembly and the publish fast path), ``_sending`` (events in, frames out: content
framing and the deliver fast path); ``_connection.Connection`` puts them together. They stack
in one line (Handshake <- ChannelTracking <- Receiving <- Sending <- Connection), not as mixins:
mypyc compiles single inheritance only (README: compiled codecs), and no two parts define the
same method, so the order changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _state as S
from . import spec
from ._buffer import ReceiveBuffer
from ._errors import RemoteProtocolError
from ._events import Event
from ._state import ChannelState, ConnectionState, Role

if TYPE_CHECKING:
    from ._rawprops import PublishParsing

__all__ = ["ConnectionBase", "ChannelRecord", "ContentMethod", "NO_TUNE"]

#: The methods that carry content (properties and a body).
ContentMethod = spec.BasicPublish | spec.BasicReturn | spec.BasicDeliver | spec.BasicGetOk
#: ``_tune`` before a connection.tune and after its tune-ok: one shared event, never mutated
NO_TUNE = spec.ConnectionTune(0, 0, 0)


class ChannelRecord:
    """One channel's state, its content assembly (method, announced size, chunks so far) and
    whether the peer paused our content (channel.flow)."""

    __slots__ = ("state", "cstate", "method", "size", "chunks", "got", "paused")

    def __init__(self, state: ChannelState) -> None:
        self.state = state
        self.paused = False  # the peer sent channel.flow(active=False): hold our content
        self.cstate = S.C_IDLE
        self.method: ContentMethod | None = None
        self.size = 0
        self.chunks: list[bytes] = []
        self.got = 0


def _text(msg: str) -> str:
    return msg.encode("utf-8")[:255].decode("utf-8", "ignore")


class ConnectionBase:
    """The attributes of ``Connection`` (see its ``__init__``) and the helpers all parts use."""

    our_role: Role
    their_role: Role
    state: ConnectionState
    config_frame_max: int
    config_channel_max: int
    config_heartbeat: int
    max_body_size: int
    frame_max: int
    channel_max: int
    heartbeat: int
    _recv_max_payload: int
    _send_max_payload: int
    _buf: ReceiveBuffer
    _eof: bool
    _broken: RemoteProtocolError | None
    _bad_header: bool
    _queued: list[Event]
    _channels: dict[int, ChannelRecord]
    _may_send: frozenset[type]
    _may_recv: frozenset[type]
    _last_recv: float | None
    _last_send: float | None
    _due_sent: bool
    _timed_out: bool
    _tune: spec.ConnectionTune
    _fast_publish: bool
    _publishing: PublishParsing
    _tag_cache: dict[str, bytes]
    _route_cache: dict[tuple[str, str], bytes]

    def _hard(self, code: int, msg: str, cls: Any = None, fatal: bool = False
              ) -> RemoteProtocolError:
        hint = spec.ConnectionClose(code, _text(msg), cls.CLASS_ID if cls else 0,
                                    cls.METHOD_ID if cls else 0)
        return RemoteProtocolError(msg, code, hint, fatal=fatal)

    def _discarding(self) -> bool:
        st = self.state
        return st is S.ERROR or st is S.CLOSED or S.CLOSING_BY.get(st) is self.our_role

    def _chan_discarding(self, chan: ChannelRecord) -> bool:
        return chan.state is S.CH_ERROR or S.CH_DISCARDING.get(chan.state) is self.our_role
