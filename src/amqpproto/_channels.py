"""Each channel's state machine: the transitions of what either side sends on a channel (open,
close, any method while open) and the checks on what we may send (channel.flow included)."""

from __future__ import annotations

from typing import Any

from . import _state as S
from . import spec
from ._base import ChannelRecord
from ._errors import LocalProtocolError
from ._handshake import Handshake
from ._state import CLIENT, ChannelState, Role

__all__ = ["ChannelTracking", "CHANNEL_MGMT"]

#: the channel class's own open/close methods, never "any method on an open channel"
CHANNEL_MGMT = frozenset({spec.ChannelOpen, spec.ChannelOpenOk, spec.ChannelClose, spec.ChannelCloseOk})


class ChannelTracking(Handshake):
    def channel_state(self, channel: int) -> ChannelState:
        """The channel's state (``ChannelState``); CH_CLOSED if unknown."""
        ch = self._channels.get(channel)
        return ch.state if ch is not None else S.CH_CLOSED

    def channel_paused(self, channel: int) -> bool:
        """True while the peer's channel.flow(active=False) holds our content on ``channel``
        (basic.get-ok excepted, as the spec says); sending such content is a LocalProtocolError."""
        ch = self._channels.get(channel)
        return ch is not None and ch.paused

    @staticmethod
    def _channel_next(st: ChannelState, cls: Any, sender: Role) -> ChannelState | None:
        new = S.CHANNEL_TABLE.get((sender, st, cls))
        if new is None and cls not in CHANNEL_MGMT and (
                cls.BY_CLIENT if sender is CLIENT else cls.BY_SERVER):
            new = S.CHANNEL_TABLE.get((sender, st, S.ANY_METHOD))
        return new

    def _set_channel(self, ch: int, chan: ChannelRecord | None, new: ChannelState) -> None:
        if new is S.CH_CLOSED:
            self._channels.pop(ch, None)
        elif chan is None:
            self._channels[ch] = ChannelRecord(new)
        else:
            chan.state = new

    def _after_channel_method(self, cls: Any, ch: int, sender: Role) -> None:
        chan = self._channels.get(ch)
        if chan is not None and chan.state is S.CH_OPEN and cls not in CHANNEL_MGMT:
            return
        st = chan.state if chan is not None else S.CH_CLOSED
        new = self._channel_next(st, cls, sender)
        if new is not None:
            self._set_channel(ch, chan, new)

    def _channel_send_check(self, cls: Any, ch: int) -> None:
        if cls.CLASS_ID == 10:
            raise LocalProtocolError(f"{cls.NAME} must be sent on channel 0")
        if self.state is not S.OPEN:
            if not (self.state in S.CLOSING_BY and cls in (spec.ChannelCloseOk,)):
                raise LocalProtocolError(f"{cls.NAME} while the connection is {self.state}")
        if not 0 < ch <= 65535:
            raise LocalProtocolError(f"channel {ch} outside 1..65535")
        chan = self._channels.get(ch)
        if chan is not None and chan.state is S.CH_OPEN and cls in self._may_send and \
                cls not in CHANNEL_MGMT:
            if chan.paused and cls.CONTENT and cls is not spec.BasicGetOk:
                raise LocalProtocolError(f"the peer paused content on channel {ch} "
                                         "(channel.flow active=False)")
            return
        st = chan.state if chan is not None else S.CH_CLOSED
        if self._channel_next(st, cls, self.our_role) is None:
            raise LocalProtocolError(
                f"{cls.NAME} from the {self.our_role.value} not allowed on channel {ch} in {st}")
