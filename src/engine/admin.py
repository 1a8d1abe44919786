"""``Administration``: what the management API, the CLI, definitions imports and the cluster's
change log do to users, permissions, vhosts, limits and policies, on the loop thread.

The broker (``engine._broker.Broker``) inherits it; it is kept apart so the driver contract stays
one module's job. Each change is made on the model (which persists it and, in a cluster, logs it
for the other nodes), announced on the event exchange, and settled like any driver call.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

from ._session import Session
from .config import Config
from .definitions import export_definitions, import_definitions
from .model import Model, NotFound
from .model.limits import LimitKind
from .model.policies import Policy
from .model.security import Permission, TopicPermission, UserRecord, hash_password

__all__ = ["Administration"]


def _identity(session: Session) -> tuple[str | None, str | None]:
    """(user name, vhost name) a protocol session logged in with; (None, None) before it did."""
    user, vhost = getattr(session, "user", None), getattr(session, "vhost", None)
    return (None if user is None else user.name, None if vhost is None else vhost.name)


class Administration:
    """The broker's administration commands; expects the broker's model, config, rng, sessions
    and its ``_enter``/``_guarded``/``_settle`` steps."""

    config: Config
    model: Model
    rng: random.Random
    sessions: dict[int, Session]
    # the broker's own steps (engine._broker): enter a call at ``now``, run session code guarded, settle
    _enter: Callable[[float], None]
    _guarded: Callable[..., None]
    _settle: Callable[[], None]

    def _bootstrap_users(self) -> None:
        """The config file's users seed the user database the first time the store sees them,
        with full permissions on their vhosts (all configured ones when none is named); from then
        on the stored state wins, as RabbitMQ's default user seeds only a blank database: a user
        deleted or changed through the management API or a definitions import stays so."""
        config = self.config
        sec = self.model.security
        every = tuple(dict.fromkeys((*config.vhosts, config.default_vhost)))
        for user in config.users.values():
            # the salt is derived from the name so that the rng stays untouched (generated names
            # do not depend on the user list)
            salt = hashlib.sha256(b"sansmq-config-user\0" + user.name.encode()).digest()[:4]
            sec.seed(UserRecord(user.name, hash_password(user.password, salt), tags=user.tags), user.vhosts or every)
        sec.loopback_users = {u.name for u in config.users.values() if u.loopback_only}
        if "guest" not in config.users:
            sec.loopback_users.add("guest")  # RabbitMQ's loopback_users default

    def add_user(self, name: str, password: str | None, tags: tuple[str, ...] = ()) -> UserRecord:
        """Create or replace a user (a None password: no password login), salted from the rng."""
        user = self.model.security.add_user(name, password, self.rng.getrandbits(32).to_bytes(4, "big"), tags)
        self.model.events.admin("user.created", name=name)
        return user

    def put_user(self, user: UserRecord) -> UserRecord:
        """Create or replace a user from an existing hash (``password_hash`` in the API)."""
        stored = self.model.security.put_user(user)
        self.model.events.admin("user.created", name=user.name)
        return stored

    def delete_user(self, name: str, now: float | None = None) -> None:
        """Delete a user and its permissions; its connections are closed (320, as RabbitMQ)."""
        self.model.security.delete_user(name)
        self.model.limits.clear("user", name)
        self.model.events.admin("user.deleted", name=name)
        self._force_close(lambda s: _identity(s)[0] == name, f"user '{name}' was deleted", now)

    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> Permission:
        if vhost not in self.model.vhosts:
            raise NotFound(f"no vhost '{vhost}'")
        permission = self.model.security.set_permissions(Permission(user, vhost, configure, write, read))
        self.model.events.admin("permission.created", user=user, vhost=vhost, configure=configure, write=write,
                                read=read)
        return permission

    def clear_permissions(self, user: str, vhost: str) -> None:
        self.model.security.clear_permissions(user, vhost)
        self.model.events.admin("permission.deleted", user=user, vhost=vhost)

    def set_topic_permission(self, user: str, vhost: str, exchange: str, write: str, read: str) -> TopicPermission:
        if vhost not in self.model.vhosts:
            raise NotFound(f"no vhost '{vhost}'")
        return self.model.security.set_topic_permission(TopicPermission(user, vhost, exchange, write, read))

    def clear_topic_permission(self, user: str, vhost: str, exchange: str | None = None) -> None:
        self.model.security.clear_topic_permission(user, vhost, exchange)

    def add_vhost(self, name: str) -> None:
        self.model.add_vhost(name)
        self.model.policies.apply_vhost(name)
        self.model.events.admin("vhost.created", name=name)

    def delete_vhost(self, name: str, now: float | None = None) -> None:
        """Delete a vhost with everything in it; its connections are closed first (320)."""
        if name not in self.model.vhosts:
            raise NotFound(f"no vhost '{name}'")
        self._force_close(lambda s: _identity(s)[1] == name, f"vhost '{name}' is deleted", now)
        self.model.delete_vhost(name)
        self.model.security.forget_vhost(name)
        self.model.limits.clear("vhost", name)
        self.model.policies.forget_vhost(name)
        self.model.events.admin("vhost.deleted", name=name)
        self._settle()

    def set_limit(self, kind: LimitKind, owner: str, name: str, value: Any) -> None:
        """RabbitMQ's ``set_vhost_limits``/``set_user_limits`` for one limit (406 text if invalid);
        connections and queues already there stay, as in RabbitMQ: the limit refuses new ones."""
        if owner not in (self.model.vhosts if kind == "vhost" else self.model.security.users):
            raise NotFound(f"no {kind} '{owner}'")
        self.model.limits.set(kind, owner, name, value)

    def clear_limit(self, kind: LimitKind, owner: str, name: str) -> None:
        if not self.model.limits.clear(kind, owner, name):
            raise NotFound(f"no {kind} limit '{name}' for '{owner}'")

    def set_policy(self, policy: Policy) -> Policy:
        """Create or replace a policy; it applies to existing queues at once."""
        if policy.vhost not in self.model.vhosts:
            raise NotFound(f"no vhost '{policy.vhost}'")
        self.model.policies.put(policy)
        self._settle()
        return policy

    def delete_policy(self, vhost: str, name: str) -> None:
        self.model.policies.delete(vhost, name)
        self._settle()

    def export_definitions(self) -> dict[str, Any]:
        return export_definitions(self.model)

    def import_definitions(self, doc: dict[str, Any]) -> list[str]:
        """Merge a parsed definitions file (RabbitMQ's format); returns notes on what was skipped."""
        notes = import_definitions(self.model, doc)
        self._settle()
        return notes

    def _force_close(self, which: Callable[[Session], bool], why: str, now: float | None) -> None:
        if now is not None:
            self._enter(now)
        for session in list(self.sessions.values()):
            inner = getattr(session, "inner", None)  # a WebSocket carries the session that logged in
            if not session.closed and which(inner if inner is not None else session):
                self._guarded(session, session.force_close, why)
        self._settle()
