"""The broker access every management route shares: snapshots, commands and permission checks.

Reads come from a plain-data snapshot of the broker (``engine.stats.snapshot``) taken on the
broker's thread and shared by requests for ``SNAPSHOT_TTL`` seconds; changes run as commands on
the broker's thread (``Driver.call_soon``), so no lock guards the model."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from engine.model.errors import AccessRefused, NotFound, PreconditionFailed
from engine.model.security import UserAccess
from engine.stats import snapshot

from .request import Request, bad_request, not_found, unauthorised

#: how long one snapshot of the broker serves requests (counts lag traffic by at most this)
SNAPSHOT_TTL = 0.2


class ApiBase:
    """Access to the broker shared by every group of routes: cached snapshots to read, commands
    to change it, and the checks of who may do what."""

    def __init__(self, call: Callable[[Callable[[Any], Any]], Any], listeners: Callable[[], list[Any]],
                 node: str = "sansmq@localhost") -> None:
        self.call = call
        self.listeners = listeners
        self.node = node
        #: the cluster's name (a node alone is its own cluster, as RabbitMQ's)
        self.cluster_name = node
        #: a cluster node: every node of the cluster in ``/api/nodes``'s shape (None: a node alone)
        self.cluster_nodes: Callable[[], list[dict[str, Any]]] | None = None
        #: sections asked for -> (monotonic time taken, snapshot)
        self._snaps: dict[tuple[str, ...], tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        #: HTTP listeners whose loop died (name -> why), shared with OpsListeners
        self.failed: dict[str, str] = {}

    def snap(self, *sections: str, fresh: bool = False) -> dict[str, Any]:
        """A snapshot with the object lists ``sections`` (engine.stats.SECTIONS). Without sections it
        is at most ``SNAPSHOT_TTL`` old, shared by the requests of that moment; one with object lists
        is taken for the request and freed with it (kept, with 100,000 queues it held tens of MB)."""
        key = tuple(sorted(sections))
        if key:
            return self.call(lambda broker: snapshot(broker, key))  # type: ignore[no-any-return]
        with self._lock:
            cached = self._snaps.get(key)
            if fresh or cached is None or time.monotonic() - cached[0] > SNAPSHOT_TTL:
                cached = (time.monotonic(), self.call(lambda broker: snapshot(broker, key)))
                self._snaps[key] = cached
            return cached[1]

    def command(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(broker)`` on the broker's thread; the next read takes a fresh snapshot."""
        try:
            return self.call(fn)
        finally:
            with self._lock:
                self._snaps.clear()

    def _check_vhost(self, req: Request, vhost: str) -> None:
        if vhost not in self.snap()["vhosts"]:
            raise not_found()
        if not req.principal.sees_vhost(vhost):
            raise unauthorised("User not authorised to access virtual host")

    def _check_access(self, req: Request, vhost: str, access: str, kind: str, name: str) -> None:
        """401 (RabbitMQ's status for every refusal) unless the user's permission in ``vhost``
        grants ``access`` (configure, write, read) to ``name`` (the default exchange is the
        resource amq.default), as over AMQP."""
        self._check_vhost(req, vhost)
        if vhost not in req.principal.permissions:
            raise unauthorised("User not authorised to access virtual host")
        resource = "amq.default" if kind == "exchange" and name == "" else name
        if not req.principal.allows(vhost, access, resource):
            raise unauthorised("Access refused.")

    def _command_400(self, fn: Callable[[Any], Any]) -> Any:
        """A command whose refusal by the model (a bad policy, an unknown vhost...) is a 400."""
        try:
            return self.command(fn)
        except AccessRefused:  # a channel's 403: RabbitMQ's API answers its usual refusal
            raise unauthorised("Access refused.") from None
        except (PreconditionFailed, NotFound, ValueError, KeyError, TypeError) as exc:
            raise bad_request(str(exc)) from None

    @staticmethod
    def user_access(broker: Any, req: Request, vhost: str) -> UserAccess:
        """The request's user as an AMQP channel in ``vhost`` would be: RabbitMQ's API declares,
        binds and publishes through one, so the same checks apply (run on the broker's thread)."""
        return UserAccess(broker.model.security, req.principal.name, vhost)

    def _admin(self, req: Request) -> None:
        if not req.principal.is_admin:
            raise unauthorised("Not administrator user")

    def _node(self) -> dict[str, Any]:
        return {"name": self.node, "type": "disc", "running": True}

