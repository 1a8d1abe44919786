"""How the management API shows things: RabbitMQ's names and JSON shapes for rates, connections,
binding keys, message properties and payloads."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import urllib.parse
from typing import Any

from amqpproto import BasicProperties
from engine._message import Message
from engine._props import headers_to_props
from engine.stats import COUNTERS, QUEUE_COUNTERS, QUEUE_DEPTHS

from .auth import Principal
from .request import HttpError, bad_request


def vhost_names(snap: dict[str, Any], who: Principal) -> list[str]:
    return [v for v in snap["vhosts"] if who.sees_vhost(v)]


def rate(value: float) -> dict[str, float]:
    return {"rate": value}


def message_stats(snap: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, _ in COUNTERS:
        out[name] = snap["totals"][name]
        out[f"{name}_details"] = rate(snap["rates"][name])
    return out


def queue_rates(counters: dict[str, int], rates: dict[str, float]) -> dict[str, Any]:
    """A queue's ``message_stats`` (as RabbitMQ: only once it has seen traffic) and the rates of its
    depths, from the snapshot's counters and sampled rates (engine.stats)."""
    out: dict[str, Any] = {f"{depth}_details": rate(rates.get(depth, 0.0)) for depth in QUEUE_DEPTHS}
    if any(counters.values()):
        stats: dict[str, Any] = {}
        for name, _ in QUEUE_COUNTERS:
            stats[name] = counters[name]
            stats[f"{name}_details"] = rate(rates.get(name, 0.0))
        out["message_stats"] = stats
    return out


def conn_name(info: dict[str, Any]) -> str:
    """RabbitMQ names a connection 'peer:port -> node:port'; ours ends with its connection id."""
    peer = info.get("peer") or ("?", 0)
    return f"{peer[0]}:{peer[1] if len(peer) > 1 else 0} -> sansmq#{info['conn_id']}"


def props_key(routing_key: str, args: dict[str, Any]) -> str:
    """RabbitMQ's binding 'properties key': the routing key ('~' when empty), plus a hash of the
    arguments when there are any."""
    key = urllib.parse.quote(routing_key, safe="") if routing_key else "~"
    if args:
        digest = base64.urlsafe_b64encode(hashlib.sha256(json.dumps(args, sort_keys=True).encode()).digest())
        key += "~" + digest[:22].decode()
    return key


def props_dict(msg: Message) -> dict[str, Any]:
    """The message's AMQP properties as the API shows them (absent ones left out)."""
    props = headers_to_props(msg.headers, msg.persistent, msg.priority)
    out = {f.name: getattr(props, f.name) for f in dataclasses.fields(props) if getattr(props, f.name) is not None}
    if out.get("headers") == {}:
        del out["headers"]
    return out


_PROPERTY_NAMES = frozenset(f.name for f in dataclasses.fields(BasicProperties))


def publish_properties(given: Any) -> BasicProperties:
    """The properties of a publish through the API: unknown names ignored, integers checked (as
    RabbitMQ: 400 with reason ["not_int", name])."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise bad_request("properties must be an object")
    props = {k: v for k, v in given.items() if k in _PROPERTY_NAMES}
    for name in ("delivery_mode", "priority", "timestamp"):
        if name in props and (not isinstance(props[name], int) or isinstance(props[name], bool)):
            raise HttpError(400, "bad_request", ["not_int", name])
    if "headers" in props and not isinstance(props["headers"], dict):
        raise HttpError(400, "bad_request", ["not_table", "headers"])  # type: ignore[arg-type]
    return BasicProperties(**props)


def payload_text(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    if truncate is not None:
        body = body[:truncate]
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode(), "base64"


