"""BEGIN, COMMIT and ABORT: SEND, ACK and NACK frames naming a transaction are buffered (within
the per-connection caps) and applied on COMMIT; without one they apply at once, their receipt held
until the store has synced what they wrote."""

from __future__ import annotations

from collections.abc import Callable

from stompproto import Abort, Ack, Begin, Commit, Frame, Nack, Send

from .._mypyc import interpreted_class
from .base import StompBase, Tx
from .errors import StompError

__all__ = ["TxMethods"]


@interpreted_class
class TxMethods(StompBase):
    __slots__ = ()

    def _transactional(self, frame: Frame, apply: Callable[[Frame], dict[str, str] | None]) -> None:
        """Run ``apply`` now (it may return extra receipt headers), or buffer the frame when it
        names a transaction."""
        headers = frame.headers
        tx = headers.get("transaction")
        if tx is None:
            if "receipt" not in headers:  # the common case: no receipt to hold back for the store
                apply(frame)
                return
            before = self.model.store_writes
            extra = apply(frame)
            if not self.closed:
                self._receipt(frame, self.model.store_writes != before, extra)
            return
        if self.txs is None or tx not in self.txs:
            raise StompError("Bad transaction", f"transaction '{tx}' is not active")
        buffered = self.txs[tx]
        limits = self.host.config.limits
        buffered.size += len(frame.body) + sum(len(k) + len(v) for k, v in frame.headers.items())
        if len(buffered.frames) >= limits.max_tx_frames or buffered.size > limits.max_tx_bytes:
            raise StompError("Transaction too large",
                             f"transaction '{tx}' exceeds {limits.max_tx_frames} frames or {limits.max_tx_bytes} bytes")
        buffered.frames.append(frame)
        self._receipt(frame, False)

    def _on_send(self, frame: Send) -> None:
        self._transactional(frame, self._apply_send)

    def _on_ack(self, frame: Ack) -> None:
        self._transactional(frame, self._apply_settle)

    def _on_nack(self, frame: Nack) -> None:
        self._transactional(frame, self._apply_settle)

    def _apply_settle(self, frame: Frame) -> None:
        """An ACK or NACK applied now. With a receipt, the removal it wrote must be durable when the
        receipt goes: the store otherwise lets removals ride along with a later journal fsync (a
        power cut would bring a receipted ack's message back; found by crash_test.py --power-cut)."""
        self._apply_ack(frame)
        if "receipt" in frame.headers:
            self.model.store.removals_must_sync()

    def _on_begin(self, frame: Begin) -> None:
        tx = frame.headers.get("transaction")
        if tx is None:
            raise StompError("Missing transaction", "BEGIN needs a transaction header")
        if self.txs is None:
            self.txs = {}
        if tx in self.txs:
            raise StompError("Bad transaction", f"transaction '{tx}' is already active")
        limit = self.host.config.limits.max_transactions
        if len(self.txs) >= limit:
            raise StompError("Too many transactions", f"at most {limit} open transactions per connection")
        self.txs[tx] = Tx()
        self._receipt(frame, False)

    def _end_tx(self, frame: Frame) -> list[Frame]:
        tx = frame.headers.get("transaction")
        if tx is None or self.txs is None or tx not in self.txs:
            raise StompError("Bad transaction", f"transaction '{tx}' is not active")
        frames = self.txs.pop(tx).frames
        if not self.txs:
            self.txs = None
        return frames

    def _on_commit(self, frame: Commit) -> None:
        frames = self._end_tx(frame)
        before = self.model.store_writes
        for buffered in frames:
            if isinstance(buffered, Send):
                self._apply_send(buffered)
            else:
                self._apply_ack(buffered)
            if self.closed:
                return
        if "receipt" in frame.headers and any(not isinstance(f, Send) for f in frames):
            self.model.store.removals_must_sync()  # the receipt covers the acks too (_apply_settle)
        self._receipt(frame, self.model.store_writes != before)

    def _on_abort(self, frame: Abort) -> None:
        self._end_tx(frame)
        self._receipt(frame, False)
