"""Vhosts, users and their permissions (the broker's user database)."""

from __future__ import annotations

import time
from typing import Any

from engine.model.errors import PreconditionFailed
from engine.model.security import DEFAULT_HASHING, UserRecord

from .base import ApiBase
from .request import Request, bad_request, not_found, put_status
from .shapes import vhost_names


class AccessRoutes(ApiBase):
    """Vhosts, users and their permissions (the broker's user database)."""

    def _vhost_info(self, snap: dict[str, Any], name: str) -> dict[str, Any]:
        counts = snap["counts"][name]
        return {"name": name, "description": "", "tags": [], "tracing": False,
                **{k: counts[k] for k in ("messages", "messages_ready", "messages_unacknowledged")}}

    def vhosts(self, req: Request) -> Any:
        snap = self.snap()
        return [self._vhost_info(snap, v) for v in vhost_names(snap, req.principal)]

    def vhost(self, req: Request, name: str) -> Any:
        self._check_vhost(req, name)
        return self._vhost_info(self.snap(), name)

    def put_vhost(self, req: Request, name: str) -> Any:
        self._admin(req)
        req.json()
        existed = name in self.snap(fresh=True)["vhosts"]
        self.command(lambda b: b.add_vhost(name))
        return put_status(existed)

    def delete_vhost(self, req: Request, name: str) -> Any:
        self._admin(req)
        self._check_vhost(req, name)
        self._command_400(lambda b: b.delete_vhost(name, time.time()))
        return None

    # -- users and permissions (the broker's user database) --------------------------------------
    @staticmethod
    def _user_info(user: Any, limits: dict[str, dict[str, int]]) -> dict[str, Any]:
        return {"name": user.name, "tags": list(user.tags), "password_hash": user.password_hash,
                "hashing_algorithm": user.hashing_algorithm, "limits": limits.get(user.name, {})}

    def users(self, req: Request) -> Any:
        self._admin(req)
        snap = self.snap()
        return [self._user_info(u, snap["user_limits"]) for u in snap["users"].values()]

    def user(self, req: Request, name: str) -> Any:
        self._admin(req)
        snap = self.snap()
        user = snap["users"].get(name)
        if user is None:
            raise not_found()
        return self._user_info(user, snap["user_limits"])

    def put_user(self, req: Request, name: str) -> Any:
        self._admin(req)
        body = req.json()
        tags = body.get("tags", None)
        if isinstance(tags, str):  # RabbitMQ takes "a,b" as well as a list
            tags = [t for t in tags.split(",") if t]
        if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise bad_request("tags must be a list of strings or a comma-separated string")
        password, phash = body.get("password"), body.get("password_hash")
        algorithm = body.get("hashing_algorithm", DEFAULT_HASHING)
        old = self.snap(fresh=True)["users"].get(name)
        keep_tags = tuple(tags) if tags is not None else (old.tags if old else ())

        if password is not None and str(password) == "":
            raise bad_request("a password must not be blank")  # RabbitMQ refuses blank passwords

        def put(b: Any) -> None:
            if password is not None:
                b.add_user(name, str(password), keep_tags)
            elif phash is not None:
                record = UserRecord.from_json({"name": name, "password_hash": phash,
                                               "hashing_algorithm": algorithm, "tags": list(keep_tags)})
                if record.has_blank_password():
                    raise PreconditionFailed("a password must not be blank")
                b.put_user(record)
            elif old is None:  # neither: a user that cannot log in by password (RabbitMQ's too)
                b.add_user(name, None, keep_tags)
            else:
                b.put_user(UserRecord(name, old.password_hash, old.hashing_algorithm, keep_tags))

        self._command_400(put)
        return put_status(old is not None)

    def delete_user(self, req: Request, name: str) -> Any:
        self._admin(req)
        if name not in self.snap(fresh=True)["users"]:
            raise not_found()
        self.command(lambda b: b.delete_user(name, time.time()))
        return None

    def _perms(self, user: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.snap()["permissions"]
                if (user is None or p.user == user) and (vhost is None or p.vhost == vhost)]

    def permissions(self, req: Request) -> Any:
        self._admin(req)
        return self._perms()

    def user_permissions(self, req: Request, name: str) -> Any:
        self._admin(req)
        if name not in self.snap()["users"]:
            raise not_found()
        return self._perms(user=name)

    def permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        found = self._perms(name, vhost)
        if not found:
            raise not_found()
        return found[0]

    def put_permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        self._check_vhost(req, vhost)
        body = req.json()
        if name not in self.snap()["users"]:
            raise bad_request(f"user '{name}' does not exist")
        fields = [body.get(k, "") for k in ("configure", "write", "read")]
        if not all(isinstance(f, str) for f in fields):
            raise bad_request("configure, write and read must be strings (regular expressions)")
        existed = bool(self._perms(name, vhost))
        self._command_400(lambda b: b.set_permissions(name, vhost, *fields))
        return put_status(existed)

    def delete_permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        if not self._perms(name, vhost):
            raise not_found()
        self.command(lambda b: b.clear_permissions(name, vhost))
        return None

