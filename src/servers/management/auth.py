"""Who may use the management API: HTTP basic auth against the broker's users and their tags.

RabbitMQ's management tags: ``administrator`` (everything), ``monitoring`` (read everything),
``policymaker`` (policies of its vhosts), ``management`` (its own vhosts' objects). A user without
any of them is refused (403). Users of today's config file carry no tags: they count as
administrators (``tags`` on a user object, when the broker's users have them, take over).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from typing import Any

from engine._session import is_loopback

__all__ = ["MANAGEMENT_TAGS", "Principal", "authenticate"]

MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    tags: tuple[str, ...]
    vhosts: tuple[str, ...]  # empty: every vhost

    @property
    def is_admin(self) -> bool:
        return "administrator" in self.tags

    @property
    def can_monitor(self) -> bool:
        return self.is_admin or "monitoring" in self.tags

    def sees_vhost(self, vhost: str) -> bool:
        return self.can_monitor or not self.vhosts or vhost in self.vhosts

    def may_write(self, vhost: str) -> bool:
        return self.is_admin or not self.vhosts or vhost in self.vhosts


def user_tags(user: Any) -> tuple[str, ...]:
    tags = getattr(user, "tags", None)
    if tags is None:
        return ("administrator",)
    return tuple(tags)


def authenticate(config: Any, header: str | None, remote_addr: str | None) -> Principal | None:
    """The user named by an ``Authorization: Basic`` header, or None (then 401)."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        name, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user = config.users.get(name)
    if user is None:
        return None
    check = getattr(user, "check_password", None)
    ok = check(password) if check is not None else hmac.compare_digest(user.password.encode(), password.encode())
    if not ok:
        return None
    if user.loopback_only and not is_loopback((remote_addr or "",)):
        return None
    return Principal(name, user_tags(user), tuple(user.vhosts))
