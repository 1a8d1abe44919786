"""Vhost and user limits (RabbitMQ's ``/api/vhost-limits`` and ``/api/user-limits``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import ApiBase
from .request import Request, bad_request, not_found

#: the owner field of each kind's listing entries, as RabbitMQ names it
_OWNER = {"vhost": "vhost", "user": "user"}


class LimitRoutes(ApiBase):
    """``GET /api/{vhost,user}-limits[/owner]`` lists ``{"vhost"|"user": owner, "value": {...}}``;
    ``PUT .../owner/name`` with ``{"value": N}`` sets one, ``DELETE`` clears it. Administrators only."""

    def _limits(self, req: Request, kind: str, owner: str | None) -> Any:
        self._admin(req)
        table = self.call(lambda b: {o: dict(v) for o, v in b.model.limits.limits[kind].items()})
        return [{_OWNER[kind]: o, "value": v} for o, v in table.items() if owner is None or o == owner]

    def _put_limit(self, req: Request, kind: str, owner: str, name: str) -> Any:
        self._admin(req)
        body = req.json()
        if "value" not in body:
            raise bad_request("a limit needs a value, e.g. {\"value\": 100}")
        self._command_400(lambda b: b.set_limit(kind, owner, name, body["value"]))
        return None

    def _delete_limit(self, req: Request, kind: str, owner: str, name: str) -> Any:
        self._admin(req)
        if name not in self.call(lambda b: b.model.limits.of(kind, owner)):
            raise not_found()
        self.command(lambda b: b.clear_limit(kind, owner, name))
        return None

    def limit_routes(self) -> list[tuple[tuple[str, ...], dict[str, Callable[..., Any]]]]:
        """The route table's entries for both kinds of limits."""
        routes: list[tuple[tuple[str, ...], dict[str, Callable[..., Any]]]] = []
        for kind in ("vhost", "user"):
            def listing(req: Request, owner: str | None = None, kind: str = kind) -> Any:
                return self._limits(req, kind, owner)

            def put(req: Request, owner: str, name: str, kind: str = kind) -> Any:
                return self._put_limit(req, kind, owner, name)

            def delete(req: Request, owner: str, name: str, kind: str = kind) -> Any:
                return self._delete_limit(req, kind, owner, name)

            path = f"{kind}-limits"
            routes += [((path,), {"GET": listing}), ((path, "*"), {"GET": listing}),
                       ((path, "*", "*"), {"PUT": put, "DELETE": delete})]
        return routes
