"""The argument handling every front end shares: one place turns the public API's keywords into the
Core's operations, so asyncio, trio and sync differ only in how they wait."""

from __future__ import annotations

import socket
from typing import Any

from ._url import Params

__all__ = ["queue_args", "exchange_args", "bind_args", "publish_options", "tune_socket"]


def tune_socket(sock: Any, params: Params) -> None:
    """The URL's socket options, on every front end's socket (a trio stream forwards setsockopt)."""
    if params.send_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, params.send_buffer)


def queue_args(name: str, durable: bool, exclusive: bool, auto_delete: bool, passive: bool,
               arguments: dict[str, Any] | None) -> dict[str, Any]:
    return {"queue": name, "durable": durable, "exclusive": exclusive, "auto_delete": auto_delete,
            "passive": passive, "arguments": arguments or {}}


def exchange_args(name: str, type: str, durable: bool, auto_delete: bool, passive: bool,
                  arguments: dict[str, Any] | None) -> dict[str, Any]:
    return {"exchange": name, "type": type, "durable": durable, "auto_delete": auto_delete,
            "passive": passive, "arguments": arguments or {}}


def bind_args(queue: str, exchange: str, routing_key: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    return {"queue": queue, "exchange": exchange, "routing_key": routing_key, "arguments": arguments or {}}


def publish_options(exchange: str | None, properties: Any) -> dict[str, Any]:
    """AMQP's extras of a publish; empty for a STOMP SEND (which refuses any)."""
    options: dict[str, Any] = {}
    if exchange is not None:
        options["exchange"] = exchange
    if properties is not None:
        options["properties"] = properties
    return options
