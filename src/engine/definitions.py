"""Definitions export and import in RabbitMQ's JSON format (``rabbitmqctl export_definitions``, the
management API's ``/api/definitions``, the ``load_definitions`` setting).

Import merges: objects named in the file are created or replaced (users, permissions, policies) or
declared (vhosts, queues, exchanges, bindings: an existing one is kept as it is, as RabbitMQ's import
does); nothing absent from the file is deleted. Limits travel as RabbitMQ writes them: a user's in its
entry (``"limits": {"max-connections": 5}``), a vhost's as a ``parameters`` entry of component
``vhost-limits`` (and, in exports, the vhost entry's ``limits`` pairs). Sections sansmq has no use for
(other parameters, global_parameters, operator policies) are skipped and named in the returned notes.
Only durable topology is exported (RabbitMQ exports no transient object).
"""

from __future__ import annotations

from typing import Any

from .model import Model
from .model.errors import ModelError, PreconditionFailed
from .model.limits import check_limit
from .model.objects import Queue
from .model.policies import Policy
from .model.security import Permission, TopicPermission, UserRecord

__all__ = ["export_definitions", "import_definitions", "DEFINITIONS_VERSION"]

DEFINITIONS_VERSION = "3.10.0"
_IGNORED_SECTIONS = ("global_parameters", "operator_policies")
#: the runtime parameter component holding a vhost's limits (``rabbitmqctl set_vhost_limits``)
VHOST_LIMITS_COMPONENT = "vhost-limits"


def _builtin(exchange: str) -> bool:
    """The default exchange and the amq.* ones (the firehose's too) are the broker's own: clients
    cannot declare them, so RabbitMQ's export leaves them out and an import skips them."""
    return exchange == "" or exchange.startswith("amq.")


def export_definitions(model: Model, server_version: str = DEFINITIONS_VERSION) -> dict[str, Any]:
    """The broker's users, vhosts, permissions, policies and durable topology."""
    sec = model.security
    limits = model.limits
    queues, exchanges, bindings = [], [], []
    for vhost in model.vhosts.values():
        for q in vhost.queues.values():
            if q.durable and q.exclusive_owner is None:
                queues.append({"name": q.name, "vhost": vhost.name, "durable": True, "auto_delete": q.auto_delete,
                               "arguments": dict(q.declared_args or {})})  # a quorum queue's x-queue-type too
        for x in vhost.exchanges.values():
            if x.durable and not _builtin(x.name):
                exchanges.append({"name": x.name, "vhost": vhost.name, "type": x.type, "durable": True,
                                  "auto_delete": x.auto_delete, "internal": x.internal,
                                  "arguments": dict(x.args or {})})
        for x in vhost.exchanges.values():
            if not x.durable or x.name == "":
                continue
            for dest, key, args in x.router.bindings():
                if not dest.durable or (isinstance(dest, Queue) and dest.exclusive_owner is not None):
                    continue
                bindings.append({"source": x.name, "vhost": vhost.name, "destination": dest.name,
                                 "destination_type": "queue" if isinstance(dest, Queue) else "exchange",
                                 "routing_key": key, "arguments": dict(args or {})})
    return {
        "rabbit_version": server_version,
        "rabbitmq_version": server_version,
        "product_name": "sansmq",
        "product_version": server_version,
        # sorted: the same state exports the same file, whatever order it was built or recovered in
        "users": [{**sec.users[name].to_json(), "limits": limits.of("user", name)} for name in sorted(sec.users)],
        "vhosts": [{"name": name, "limits": [list(kv) for kv in limits.of("vhost", name).items()],
                    "metadata": {"description": "", "tags": []}} for name in sorted(model.vhosts)],
        "permissions": [sec.permissions[k].to_json() for k in sorted(sec.permissions, key=lambda k: (k[1], k[0]))],
        "topic_permissions": [sec.topic_permissions[k].to_json()
                              for k in sorted(sec.topic_permissions, key=lambda k: (k[1], k[0], k[2]))],
        "parameters": [{"value": limits.of("vhost", name), "vhost": name, "component": VHOST_LIMITS_COMPONENT,
                        "name": "limits"} for name in sorted(model.vhosts) if limits.of("vhost", name)],
        "global_parameters": [],
        "policies": [model.policies.policies[k].to_json() for k in sorted(model.policies.policies)],
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }


def import_definitions(model: Model, doc: dict[str, Any]) -> list[str]:
    """Merge ``doc`` (a parsed definitions file) into the broker. Returns notes on what was skipped.
    Raises ``PreconditionFailed`` on a malformed file, before changing anything it can check first."""
    if not isinstance(doc, dict):
        raise PreconditionFailed("a definitions file is a JSON object")
    notes: list[str] = []
    # parse everything first: a malformed entry refuses the file before anything changed
    try:
        users = [UserRecord.from_json(u) for u in doc.get("users") or ()]
        perms = [Permission.from_json(p) for p in doc.get("permissions") or ()]
        topic_perms = [TopicPermission.from_json(p) for p in doc.get("topic_permissions") or ()]
        policies = [Policy.from_json(p) for p in doc.get("policies") or ()]
        vhosts = [str(v["name"]) for v in doc.get("vhosts") or ()]
        user_limits = {str(u["name"]): dict(u["limits"]) for u in doc.get("users") or () if u.get("limits")}
        # a vhost's limits: its vhost-limits parameter, else the pairs of its vhost entry
        vhost_limits = {str(v["name"]): dict(v["limits"]) for v in doc.get("vhosts") or () if v.get("limits")}
        parameters = list(doc.get("parameters") or ())
        vhost_limits.update({str(p["vhost"]): dict(p["value"]) for p in parameters
                             if p.get("component") == VHOST_LIMITS_COMPONENT})
        others = [p for p in parameters if p.get("component") != VHOST_LIMITS_COMPONENT]
        for kind, table in (("user", user_limits), ("vhost", vhost_limits)):
            for values in table.values():
                for name, value in values.items():
                    check_limit(kind, name, value)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise PreconditionFailed(f"malformed definitions: {exc!r}") from None
    blank = [u.name for u in users if u.has_blank_password()]
    if blank:  # as a user added with a blank password through the API or the config file
        raise PreconditionFailed(f"user '{blank[0]}': a password must not be blank")
    for section in _IGNORED_SECTIONS:
        if doc.get(section):
            notes.append(f"{section}: {len(doc[section])} entries ignored (not supported)")
    if others:
        notes.append(f"parameters: {len(others)} entries ignored (not supported)")
    sec = model.security
    for u in users:
        sec.put_user(u)
        if u.name in user_limits:
            model.limits.replace("user", u.name, user_limits[u.name])
    for name in vhosts:
        model.add_vhost(name)
    for name, values in vhost_limits.items():
        model.add_vhost(name)
        model.limits.replace("vhost", name, values)
    for p in perms:
        if p.vhost not in model.vhosts:
            model.add_vhost(p.vhost)
        sec.set_permissions(p)
    for tp in topic_perms:
        if tp.vhost not in model.vhosts:
            model.add_vhost(tp.vhost)
        sec.set_topic_permission(tp)
    for x in doc.get("exchanges") or ():
        vhost = model.add_vhost(str(x.get("vhost", "/")))
        if _builtin(str(x["name"])) or x["name"] in vhost.exchanges:
            continue
        _declare(notes, "exchange", x, model.declare_exchange, vhost, str(x["name"]), str(x.get("type", "direct")),
                 bool(x.get("durable", True)), bool(x.get("auto_delete", False)), bool(x.get("internal", False)),
                 x.get("arguments") or None)
    for q in doc.get("queues") or ():
        vhost = model.add_vhost(str(q.get("vhost", "/")))
        args = dict(q.get("arguments") or {})
        if args.get("x-queue-type") == "classic":  # the default type: declared as clients declare it
            del args["x-queue-type"]
        elif q.get("type") in ("quorum", "stream") and "x-queue-type" not in args:  # exports name it so too
            args["x-queue-type"] = q["type"]
        _declare(notes, "queue", q, model.declare_queue, vhost, str(q["name"]), bool(q.get("durable", True)),
                 bool(q.get("auto_delete", False)), None, args or None)
    for b in doc.get("bindings") or ():
        holder = model.vhosts.get(str(b.get("vhost", "/")))
        source = holder.exchanges.get(str(b.get("source"))) if holder else None
        dest_name = str(b.get("destination"))
        dest = None
        if holder is not None:
            dest = holder.exchanges.get(dest_name) if b.get("destination_type") == "exchange" else \
                holder.queues.get(dest_name)
        if source is None or dest is None:
            notes.append(f"binding {b.get('source')!r} -> {dest_name!r} skipped: source or destination missing")
            continue
        _declare(notes, "binding", b, model.bind, holder, dest, source, str(b.get("routing_key", "")),
                 b.get("arguments") or None)
    for policy in policies:
        if policy.vhost not in model.vhosts:
            model.add_vhost(policy.vhost)
        model.policies.put(policy)
    return notes


def _declare(notes: list[str], what: str, entry: dict[str, Any], fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except ModelError as exc:
        notes.append(f"{what} {entry.get('name', entry.get('destination'))!r} skipped: {exc.text}")
