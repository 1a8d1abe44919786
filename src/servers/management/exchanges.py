"""Exchanges: list, declare, delete, and publish."""

from __future__ import annotations

import base64
from typing import Any

from engine._message import Message
from engine._props import props_to_headers
from engine.model.security import check_target_exchange, check_topic_access

from .base import ApiBase
from .request import Request, bad_request, not_found, put_status, unauthorised
from .shapes import publish_properties, vhost_names


class ExchangeRoutes(ApiBase):
    """Exchanges: list, declare, delete, and publish."""

    def exchanges(self, req: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._check_vhost(req, vhost)
        snap = self.snap("exchanges")
        seen = set(vhost_names(snap, req.principal))
        return [dict(x, user_who_performed_action="") for x in snap["exchanges"]
                if x["vhost"] in seen and (vhost is None or x["vhost"] == vhost)]

    def _find_exchange(self, req: Request, vhost: str, name: str) -> dict[str, Any]:
        self._check_vhost(req, vhost)
        for x in self.snap("exchanges")["exchanges"]:
            if x["vhost"] == vhost and x["name"] == name:
                return x
        raise not_found()

    def exchange(self, req: Request, vhost: str, name: str) -> Any:
        return self._find_exchange(req, vhost, name)

    def put_exchange(self, req: Request, vhost: str, name: str) -> Any:
        self._check_access(req, vhost, "configure", "exchange", name)
        body = req.json()
        xtype = body.get("type")
        if xtype not in ("direct", "fanout", "topic", "headers"):
            raise bad_request(f"unknown exchange type '{xtype}'" if xtype else "type is required")
        if name == "" or name.startswith("amq."):
            raise unauthorised("Access refused.")  # the reserved amq. prefix, as RabbitMQ words it

        def declare(b: Any) -> bool:
            v = b.model.vhosts[vhost]
            existed = name in v.exchanges
            if not existed:
                check_target_exchange(self.user_access(b, req, vhost), "exchange", name, body.get("arguments"))
            b.model.declare_exchange(v, name, xtype, bool(body.get("durable", True)),
                                     bool(body.get("auto_delete", False)), bool(body.get("internal", False)),
                                     body.get("arguments") or None)
            return existed

        return put_status(self._command_400(declare))

    def delete_exchange(self, req: Request, vhost: str, name: str) -> Any:
        self._find_exchange(req, vhost, name)
        self._check_access(req, vhost, "configure", "exchange", name)
        if name == "" or name.startswith("amq."):
            raise unauthorised("Access refused.")
        self.command(lambda b: b.model.delete_exchange(b.model.vhosts[vhost], name))
        return None

    def publish(self, req: Request, vhost: str, name: str) -> Any:
        self._find_exchange(req, vhost, name)
        self._check_access(req, vhost, "write", "exchange", name)
        body = req.json()
        props = publish_properties(body.get("properties"))
        encoding = body.get("payload_encoding", "string")
        payload = body.get("payload", "")
        if not isinstance(payload, str) or encoding not in ("string", "base64"):
            raise bad_request("payload must be a string; payload_encoding string or base64")
        try:
            data = base64.b64decode(payload, validate=True) if encoding == "base64" else payload.encode()
        except ValueError:
            raise bad_request("payload is not valid base64") from None
        routing_key = str(body.get("routing_key", ""))

        def send(b: Any) -> bool:
            model = b.model
            headers = props_to_headers(props)
            expires = None
            if props.expiration is not None:
                try:
                    expires = b.now + int(props.expiration) / 1000.0
                except ValueError:
                    raise bad_request("expiration must be a number of milliseconds") from None
            check_topic_access(self.user_access(b, req, vhost), model.vhosts[vhost].exchanges.get(name), routing_key,
                               "write")
            msg = Message(model.next_message_id(), name, routing_key, headers, data, props.priority or 0,
                          expires, props.delivery_mode == 2)
            return bool(model.publish(model.vhosts[vhost], name, msg, queue_priority_only=True))

        return {"routed": self._command_400(send)}  # a property of the wrong type is a 400

