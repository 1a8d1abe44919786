"""Connections (close one), channels and consumers."""

from __future__ import annotations

import time
from typing import Any

from .base import ApiBase
from .request import Request, not_found, unauthorised
from .shapes import conn_name, vhost_names


class ConnectionRoutes(ApiBase):
    """Connections (close one), channels and consumers."""

    def _conn_info(self, c: dict[str, Any]) -> dict[str, Any]:
        peer = c.get("peer") or ("", 0)
        return {"name": conn_name(c), "node": self.node, "protocol": c["protocol"], "user": c["user"],
                "vhost": c["vhost"], "channels": c["channels"], "peer_host": str(peer[0]),
                "peer_port": peer[1] if len(peer) > 1 else 0, "state": "running", "type": "network",
                "client_properties": {k: v for k, v in (c["client_properties"] or {}).items()
                                      if isinstance(k, str)}}

    def _visible_conns(self, req: Request) -> list[dict[str, Any]]:
        who = req.principal
        return [c for c in self.snap()["connections"] if who.can_monitor or c["user"] == who.name]

    def connections(self, req: Request) -> Any:
        return [self._conn_info(c) for c in self._visible_conns(req)]

    def _find_conn(self, req: Request, name: str) -> dict[str, Any]:
        for c in self._visible_conns(req):
            if conn_name(c) == name:
                return c
        raise not_found()

    def connection(self, req: Request, name: str) -> Any:
        return self._conn_info(self._find_conn(req, name))

    def close_connection(self, req: Request, name: str) -> Any:
        conn = self._find_conn(req, name)
        if not (req.principal.is_admin or conn["user"] == req.principal.name):
            raise unauthorised("Not administrator user")
        reason = req.environ.get("HTTP_X_REASON") or "Closed via management plugin"
        self.command(lambda b: b.force_close(conn["conn_id"], reason, time.time()))
        return None

    def channels(self, req: Request) -> Any:
        out = []
        for c in self._visible_conns(req):
            info = self._conn_info(c)
            for n in range(1, c["channels"] + 1):
                out.append({"name": f"{info['name']} ({n})", "number": n, "node": self.node, "user": c["user"],
                            "vhost": c["vhost"], "connection_details": {"name": info["name"],
                                                                        "peer_host": info["peer_host"],
                                                                        "peer_port": info["peer_port"]}})
        return out

    def consumers(self, req: Request, vhost: str | None = None) -> Any:
        snap = self.snap("consumers")
        names = {c["conn_id"]: conn_name(c) for c in snap["connections"]}
        seen = set(vhost_names(snap, req.principal))
        return [{"queue": c["queue"], "consumer_tag": c["consumer_tag"], "ack_required": c["ack_required"],
                 "prefetch_count": c["prefetch_count"], "exclusive": False, "active": True, "arguments": {},
                 "channel_details": {"connection_name": names.get(c["conn_id"], "")}}
                for c in snap["consumers"]
                if c["queue"]["vhost"] in seen and (vhost is None or c["queue"]["vhost"] == vhost)]

