"""The audit trail: one INFO line on the ``sansmq.audit`` logger per change made through the
management API (users, vhosts, permissions, topic permissions, policies, limits, definitions) or a
definitions import at start: who did it, from where, and what. Refused requests change nothing and
are not audited (the failed logins are in ``sansmq.engine``'s and the API's answers)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .request import Request

__all__ = ["api_change", "definitions_imported", "log"]

log = logging.getLogger("sansmq.audit")

#: the API's first path segment -> how the rest of the path names the object changed
_OBJECTS: dict[str, Callable[[list[str]], str]] = {
    "users": lambda a: f"user '{a[0]}'",
    "vhosts": lambda a: f"vhost '{a[0]}'",
    "permissions": lambda a: f"permissions of user '{a[1]}' in vhost '{a[0]}'",
    "topic-permissions": lambda a: f"topic permissions of user '{a[1]}' in vhost '{a[0]}'",
    "policies": lambda a: f"policy '{a[1]}' in vhost '{a[0]}'",
    "vhost-limits": lambda a: f"limit '{a[1]}' of vhost '{a[0]}'",
    "user-limits": lambda a: f"limit '{a[1]}' of user '{a[0]}'",
    "definitions": lambda a: f"definitions of vhost '{a[0]}'" if a else "definitions",
}
#: sections of a definitions file worth counting in its audit line
_SECTIONS = ("users", "vhosts", "permissions", "topic_permissions", "policies", "parameters", "queues",
             "exchanges", "bindings")


def _verb(method: str, status: int) -> str:
    if method == "DELETE":
        return "deleted"
    if method == "POST":
        return "imported"
    return "created" if status == 201 else "changed"


def definitions_summary(doc: Any) -> str:
    if not isinstance(doc, dict):
        return ""
    counts = [f"{len(doc[s])} {s.replace('_', ' ')}" for s in _SECTIONS if isinstance(doc.get(s), list) and doc[s]]
    return f" ({', '.join(counts)})" if counts else " (nothing)"


def api_change(req: Request, status: int) -> None:
    """Audit one answered API request if it changed something the trail covers."""
    if req.method not in ("PUT", "POST", "DELETE") or status >= 300 or not req.parts:
        return
    describe = _OBJECTS.get(req.parts[0])
    if describe is None or not log.isEnabledFor(logging.INFO):
        return
    what = describe(req.parts[1:])
    if req.parts[0] == "definitions":
        what += definitions_summary(req.json())
    peer = req.environ.get("REMOTE_ADDR") or "?"
    actor = req.principal.name
    log.info("audit: user '%s' from %s %s %s through the management API", actor, peer,
             _verb(req.method, status), what,
             extra={"event": "audit", "actor": actor, "peer": peer, "action": _verb(req.method, status),
                    "object": what, "via": "management API"})


def definitions_imported(path: str, doc: Any) -> None:
    """Audit the definitions file imported at start (``--definitions``, ``definitions = ...``)."""
    what = f"definitions{definitions_summary(doc)}"
    log.info("audit: the operator imported %s from the file %s at start", what, path,
             extra={"event": "audit", "actor": "operator", "action": "imported", "object": what, "via": path})
