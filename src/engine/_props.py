"""Message properties shared by every protocol, mapped as RabbitMQ's STOMP plugin maps them.

A model ``Message`` keeps its properties in ``headers`` under the STOMP header names
(``content-type``, ``persistent``, ``priority``, ``correlation-id``, ``reply-to``, ``expiration``,
``amqp-message-id``, ``timestamp``, ``type``, ``user-id``, ``app-id``, ``content-encoding``) as
strings, next to the application headers (AMQP's ``headers`` table, any AMQP field value). So a
STOMP SEND can be consumed over AMQP and the other way round.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from amqpproto import BasicProperties, from_timestamp

__all__ = ["PROPERTY_HEADERS", "props_to_headers", "headers_to_props", "stomp_value"]

#: STOMP header name -> BasicProperties field (string-valued ones)
_STR_PROPS = (
    ("content-type", "content_type"),
    ("content-encoding", "content_encoding"),
    ("correlation-id", "correlation_id"),
    ("reply-to", "reply_to"),
    ("expiration", "expiration"),
    ("amqp-message-id", "message_id"),
    ("type", "type"),
    ("user-id", "user_id"),
    ("app-id", "app_id"),
)
_get_str_props = attrgetter(*(f for _, f in _STR_PROPS))
_NO_STR_PROPS = (None,) * len(_STR_PROPS)
#: header names that become AMQP properties rather than entries of the headers table
PROPERTY_HEADERS = frozenset([h for h, _ in _STR_PROPS] + ["persistent", "priority", "timestamp"])


def props_to_headers(props: BasicProperties | None) -> dict[str, Any]:
    """The model headers for an AMQP message's properties (application headers first)."""
    if props is None:
        return {}
    table = props.headers
    out: dict[str, Any] = dict(table) if table else {}
    values = _get_str_props(props)
    if values != _NO_STR_PROPS:  # most messages carry none of them: one C-level check
        for (name, _), value in zip(_STR_PROPS, values, strict=True):
            if value is not None:
                out[name] = value
    if props.delivery_mode == 2:
        out["persistent"] = "true"
    if props.priority is not None:
        out["priority"] = str(props.priority)
    ts = props.timestamp
    if ts is not None:  # seconds since the epoch, as the STOMP plugin writes it
        out["timestamp"] = str(int(ts.timestamp()) if hasattr(ts, "timestamp") else int(ts))
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def headers_to_props(headers: dict[str, Any], persistent: bool, priority: int) -> BasicProperties:
    """AMQP properties for a model message (the inverse of :func:`props_to_headers`)."""
    props = BasicProperties()
    table: dict[str, Any] = {}
    for name, value in headers.items():
        if name not in PROPERTY_HEADERS:
            table[name] = value
    deaths = table.get("x-death")
    if isinstance(deaths, list):  # the model keeps death times as seconds: AMQP wants timestamps
        table["x-death"] = [{**d, "time": from_timestamp(d["time"])} if isinstance(d, dict)
                            and type(d.get("time")) is int else d for d in deaths]
    if table:
        props.headers = table
    if len(table) != len(headers):
        for name, field in _STR_PROPS:
            value = headers.get(name)
            if value is not None:
                setattr(props, field, str(value))
        ts = headers.get("timestamp")
        seconds = _int(ts) if ts is not None else None
        if seconds is not None and 0 <= seconds < 2**64:
            props.timestamp = from_timestamp(seconds)
        if "priority" in headers:  # as published (a queue's x-max-priority caps only the order)
            value = _int(headers["priority"])
            props.priority = max(0, min(255, priority if value is None else value))
    if persistent:
        props.delivery_mode = 2
    return props


def stomp_value(value: Any) -> str | None:
    """A header value as STOMP text (AMQP tables may hold numbers, booleans, bytes...); None for
    arrays and tables (``x-death``...), which the STOMP plugin leaves out too."""
    if type(value) is str:
        return value
    if isinstance(value, (list, tuple, dict)):
        return None
    if hasattr(value, "timestamp"):  # a datetime from an AMQP table
        return str(int(value.timestamp()))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
