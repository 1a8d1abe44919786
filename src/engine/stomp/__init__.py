"""STOMP 1.0-1.2 sessions: frames to model commands, deliveries to MESSAGE frames; destinations."""

from .session import StompSession

__all__ = ["StompSession"]
