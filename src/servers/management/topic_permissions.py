"""Topic permissions (RabbitMQ's topic authorisation): per user, vhost and topic exchange, the
routing keys the user may publish with (write) and bind with (read). Administrators only."""

from __future__ import annotations

from typing import Any

from .base import ApiBase
from .request import Request, bad_request, not_found, put_status


class TopicPermissionRoutes(ApiBase):
    """/api/topic-permissions[/vhost/user] and /api/users/user/topic-permissions."""

    def _topic_perms(self, user: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
        perms = sorted(self.snap()["topic_permissions"], key=lambda p: (p.user, p.vhost, p.exchange))
        return [p.to_json() for p in perms if (user is None or p.user == user) and (vhost is None or p.vhost == vhost)]

    def topic_permissions(self, req: Request) -> Any:
        self._admin(req)
        return self._topic_perms()

    def user_topic_permissions(self, req: Request, name: str) -> Any:
        self._admin(req)
        if name not in self.snap()["users"]:
            raise not_found()
        return self._topic_perms(user=name)

    def topic_permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        self._check_vhost(req, vhost)
        found = self._topic_perms(name, vhost)
        if not found:
            raise not_found()
        return found

    def put_topic_permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        self._check_vhost(req, vhost)
        body = req.json()
        if name not in self.snap()["users"]:
            raise bad_request(f"user '{name}' does not exist")
        exchange = body.get("exchange")
        fields = [body.get(k, "") for k in ("write", "read")]
        if not isinstance(exchange, str) or not all(isinstance(f, str) for f in fields):
            raise bad_request("exchange, write and read must be strings (write and read: regular expressions)")
        existed = any(p["exchange"] == exchange for p in self._topic_perms(name, vhost))
        self._command_400(lambda b: b.set_topic_permission(name, vhost, exchange, *fields))
        return put_status(existed)

    def delete_topic_permission(self, req: Request, vhost: str, name: str) -> Any:
        """Every topic permission of the user in the vhost, or the one of ``?exchange=``."""
        self._admin(req)
        exchange = (req.query.get("exchange") or [None])[0]
        found = [p for p in self._topic_perms(name, vhost) if exchange is None or p["exchange"] == exchange]
        if not found:
            raise not_found()
        self.command(lambda b: b.clear_topic_permission(name, vhost, exchange))
        return None
