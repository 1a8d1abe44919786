"""Per-vhost and per-user limits, as RabbitMQ's ``set_vhost_limits`` and ``set_user_limits``.

A vhost may limit its connections (``max-connections``) and queues (``max-queues``); a user its
connections (``max-connections``) and channels (``max-channels``, over all its connections). A
negative value means no limit, 0 allows none, as in RabbitMQ. The checks answer RabbitMQ's
refusal texts; sessions turn them into their protocol's error (AMQP ``connection.close`` 530 or a
406 channel error, a STOMP ``ERROR``).

Connections are counted by the sessions registered here once they are admitted (``opened``) and
until they end (``closed``), per vhost and per user, so a check costs a dictionary lookup; channels
are summed over the user's sessions only when that user has a channel limit.

Durable through the store's documents: kind ``vhost_limits`` keyed by vhost and ``user_limits``
keyed by user, each the JSON object of that owner's limits (RabbitMQ's ``value``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from ..store import Store
from .errors import PreconditionFailed

__all__ = ["ResourceLimits", "VHOST_LIMITS", "USER_LIMITS", "LimitKind"]

LimitKind = Literal["vhost", "user"]
VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")
_NAMES: dict[str, tuple[str, ...]] = {"vhost": VHOST_LIMITS, "user": USER_LIMITS}
_DOCS = {"vhost": "vhost_limits", "user": "user_limits"}


def check_limit(kind: LimitKind, name: str, value: Any) -> int:
    """The limit's value if ``name`` is one of ``kind``'s and ``value`` an integer (RabbitMQ's
    validation, its texts), else PreconditionFailed."""
    if name not in _NAMES[kind]:
        raise PreconditionFailed(f"unknown {kind} limit '{name}' (known: {', '.join(_NAMES[kind])})")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PreconditionFailed(f"{kind} limit '{name}' must be an integer, got {value!r}")
    return value


class ResourceLimits:
    """The limits and the connections they count."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: kind -> owner (vhost or user name) -> limit name -> value
        self.limits: dict[str, dict[str, dict[str, int]]] = {"vhost": {}, "user": {}}
        #: admitted sessions per vhost and per user (insertion-ordered sets)
        self._by_vhost: dict[str, dict[Any, None]] = {}
        self._by_user: dict[str, dict[Any, None]] = {}
        #: session -> (user, vhost) it was counted under
        self._counted: dict[Any, tuple[str, str]] = {}

    # -- setting ---------------------------------------------------------------------------------
    def set(self, kind: LimitKind, owner: str, name: str, value: Any, persist: bool = True) -> None:
        value = check_limit(kind, name, value)
        self.limits[kind].setdefault(owner, {})[name] = value
        if persist:
            self._save(kind, owner)

    def replace(self, kind: LimitKind, owner: str, values: dict[str, Any]) -> None:
        """Set ``owner``'s limits to exactly ``values`` (a definitions import), checked first."""
        checked = {name: check_limit(kind, name, value) for name, value in values.items()}
        if checked:
            self.limits[kind][owner] = checked
        else:
            self.limits[kind].pop(owner, None)
        self._save(kind, owner)

    def clear(self, kind: LimitKind, owner: str, name: str | None = None) -> bool:
        """Drop one limit (every limit of ``owner`` when ``name`` is None); False if none was set."""
        held = self.limits[kind].get(owner)
        if not held or (name is not None and name not in held):
            return False
        if name is None:
            held.clear()
        else:
            del held[name]
        if not held:
            del self.limits[kind][owner]
        self._save(kind, owner)
        return True

    def of(self, kind: LimitKind, owner: str) -> dict[str, int]:
        return dict(self.limits[kind].get(owner, {}))

    def _limit(self, kind: LimitKind, owner: str, name: str) -> int | None:
        value = self.limits[kind].get(owner, {}).get(name)
        return None if value is None or value < 0 else value

    def _save(self, kind: LimitKind, owner: str) -> None:
        held = self.limits[kind].get(owner)
        if held:
            self.store.put_doc(_DOCS[kind], owner, json.dumps(held))
        else:
            self.store.delete_doc(_DOCS[kind], owner)

    def restore(self, docs: dict[tuple[str, str], str]) -> None:
        for (doc_kind, owner), doc in docs.items():
            for kind, name in _DOCS.items():
                if doc_kind == name:
                    self.limits[kind][owner] = dict(json.loads(doc))

    # -- checks ------------------------------------------------------------------------------------
    def connection_refusal(self, user: str, vhost: str) -> tuple[str, str] | None:
        """None when ``user`` may open one more connection to ``vhost``, else (which limit, RabbitMQ's
        text): the vhost's limit is checked first, as RabbitMQ does."""
        limit = self._limit("vhost", vhost, "max-connections")
        if limit is not None and len(self._by_vhost.get(vhost, ())) >= limit:
            return "vhost", (f"access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) "
                             f"is reached")
        limit = self._limit("user", user, "max-connections")
        if limit is not None and len(self._by_user.get(user, ())) >= limit:
            return "user", f"Connection refused for user '{user}': user connection limit ({limit}) is reached"
        return None

    def channel_refusal(self, user: str) -> str | None:
        """None when ``user`` may open one more channel (over all its connections)."""
        limit = self._limit("user", user, "max-channels")
        if limit is None:
            return None
        opened = sum(s.describe()["channels"] for s in self._by_user.get(user, ()))
        if opened >= limit:
            return f"number of channels opened for user '{user}' has reached the maximum allowed user limit of " \
                   f"({limit})"
        return None

    def queue_refusal(self, vhost: str, queues: int, name: str) -> None:
        """PreconditionFailed (406) when the vhost holds ``queues`` already and may hold no more."""
        limit = self._limit("vhost", vhost, "max-queues")
        if limit is not None and queues >= limit:
            raise PreconditionFailed(f"cannot declare queue '{name}': queue limit in vhost '{vhost}' ({limit}) "
                                     f"is reached")

    # -- counting ------------------------------------------------------------------------------------
    def opened(self, session: Any, user: str, vhost: str) -> None:
        self._counted[session] = (user, vhost)
        self._by_vhost.setdefault(vhost, {})[session] = None
        self._by_user.setdefault(user, {})[session] = None

    def closed(self, session: Any) -> None:
        counted = self._counted.pop(session, None)
        if counted is None:
            return
        user, vhost = counted
        for table, key in ((self._by_user, user), (self._by_vhost, vhost)):
            members = table.get(key)
            if members is not None:
                members.pop(session, None)
                if not members:
                    del table[key]
