"""Who may use the management API: HTTP basic auth against the broker's users and their tags.

RabbitMQ's management tags: ``administrator`` (everything), ``monitoring`` (read everything),
``policymaker`` (policies of the vhosts it has permissions in), ``management`` (the objects of
those vhosts). A user without any of them gets 403. Loopback-only users (guest) must come from a
loopback address. Object operations also need the user's configure/write/read permission on the
resource, as over AMQP.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from engine._session import is_loopback

__all__ = ["MANAGEMENT_TAGS", "Principal", "authenticate"]

MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    tags: tuple[str, ...]
    #: vhost -> the user's Permission there (engine.model.security)
    permissions: dict[str, Any]

    @property
    def is_admin(self) -> bool:
        return "administrator" in self.tags

    @property
    def can_monitor(self) -> bool:
        return self.is_admin or "monitoring" in self.tags

    @property
    def makes_policies(self) -> bool:
        return self.is_admin or "policymaker" in self.tags

    def sees_vhost(self, vhost: str) -> bool:
        return self.can_monitor or vhost in self.permissions

    def allows(self, vhost: str, access: str, resource: str) -> bool:
        perm = self.permissions.get(vhost)
        return perm is not None and perm.allows(access, resource)


def authenticate(snap: dict[str, Any], header: str | None, remote_addr: str | None) -> Principal | None:
    """The user named by an ``Authorization: Basic`` header, or None (then 401)."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        name, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user = snap["users"].get(name)
    if user is None or not user.password_hash or not user.check(password):
        return None
    if name in snap["loopback_users"] and not is_loopback((remote_addr or "",)):
        return None
    perms = {p.vhost: p for p in snap["permissions"] if p.user == name}
    return Principal(name, tuple(user.tags), perms)
