"""A STOMP protocol error: an ERROR frame, then the connection closes (only this one)."""

from __future__ import annotations

from ..model import ModelError

__all__ = ["StompError", "model_error_title"]


class StompError(Exception):
    """Send an ERROR frame with this message and close the connection."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.receipt: str | None = None


def model_error_title(exc: ModelError) -> str:
    return {404: "not_found", 403: "access_refused", 405: "resource_locked", 406: "precondition_failed",
            540: "not_implemented"}.get(
        exc.code, "internal_error"
    )
