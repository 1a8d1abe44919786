"""The node and its health checks, as RabbitMQ's: resource alarms, listeners, aliveness.

A check answers 200 ``{"status": "ok"}`` or 503 ``{"status": "failed", "reason": ...}``. An HTTP
listener whose loop died (OpsListeners records it in ``failed``) fails the listener checks.
"""

from __future__ import annotations

from typing import Any

from engine._message import Message

from .._fds import fd_alarm, fd_limit, open_fds
from .base import ApiBase
from .prometheus import resident_bytes
from .queues import GetHolder, NoOwner
from .request import Request


def _failed(reason: str, **more: Any) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
    return 503, {"status": "failed", "reason": reason, **more}, []


def alarms_in_effect(snap: dict[str, Any], fds: tuple[int, int]) -> list[str]:
    """RabbitMQ's names of the resource alarms on: memory, disk, file_descriptor_limit."""
    on = [name for name in ("memory", "disk") if snap["alarms"][name]]
    return on + ["file_descriptor_limit"] if fd_alarm(*fds) else on


class HealthRoutes(ApiBase):
    """/api/nodes and /api/health/checks/*."""

    def nodes(self, req: Request) -> Any:
        """This node with its figures; in a cluster, every node (the others as the database lists them)."""
        snap = self.snap(fresh=True)
        used, total = open_fds(), fd_limit()
        disk_free, disk_limit = snap["disk_free"], snap["disk_free_limit"]
        figures = {"fd_used": used, "fd_total": total, "sockets_used": len(snap["connections"]),
                   "sockets_total": total, "mem_used": resident_bytes(), "mem_limit": snap["memory_high_watermark"],
                   "mem_alarm": snap["alarms"]["memory"], "disk_free": disk_free if disk_free is not None else 0,
                   "disk_free_limit": disk_limit, "disk_free_alarm": snap["alarms"]["disk"],
                   "listeners_failed": sorted(self.failed)}
        if self.cluster_nodes is None:
            return [{**self._node(), **figures}]
        return [{**n, **figures} if n["name"] == self.node else n for n in self.cluster_nodes()]

    def alarms(self, req: Request) -> Any:
        """/api/health/checks/alarms (and local-alarms: a single node)."""
        on = alarms_in_effect(self.snap(fresh=True), (open_fds(), fd_limit()))
        if on:
            return _failed("resource alarm(s) in effect in the cluster",
                           alarms=[{"resource": name, "node": self.node} for name in on])
        return {"status": "ok"}

    def port_listener(self, req: Request, port: str) -> Any:
        ports = [p for _, _, p in self.listeners()]
        if not port.isdigit() or int(port) not in ports:
            return _failed("No active listener", missing=int(port) if port.isdigit() else port, ports=ports)
        return {"status": "ok", "port": int(port)}

    def protocol_listener(self, req: Request, protocol: str) -> Any:
        protocols = list(dict.fromkeys(p for p, _, _ in self.listeners()))
        if protocol not in protocols:
            return _failed("No active listener", missing=protocol, protocols=protocols)
        return {"status": "ok", "protocol": protocol}

    def aliveness(self, req: Request, vhost: str) -> Any:
        self._check_access(req, vhost, "configure", "queue", "aliveness-test")

        def check(b: Any) -> bool:
            model = b.model
            v = model.vhosts[vhost]
            q = model.declare_queue(v, "aliveness-test", False, False, None, None)
            model.publish(v, "", Message(model.next_message_id(), "", "aliveness-test", {}, b"test_message"))
            holder = GetHolder(q, NoOwner(), 0, True)  # type: ignore[arg-type]
            got = model.get(q, holder)
            return got is not None and got[1].msg.body == b"test_message"

        ok = self.command(check)
        return {"status": "ok"} if ok else _failed("aliveness test failed")
