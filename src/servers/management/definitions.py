"""Definitions export/import in RabbitMQ's file format (``GET``/``POST /api/definitions``).

Export covers what sansmq has: vhosts, users (as configured), permissions, durable and transient
queues, exchanges (not the built-in ones) and bindings. Import declares them on the broker's thread
and adds users; unknown sections (policies, parameters) are accepted and ignored until the broker
has them.
"""

from __future__ import annotations

from typing import Any

from engine.config import User

__all__ = ["export_definitions", "import_definitions"]


def _builtin(name: str) -> bool:
    return name == "" or name.startswith("amq.")


def export_definitions(snap: dict[str, Any], config: Any, only_vhost: str | None = None) -> dict[str, Any]:
    def keep(v: str) -> bool:
        return only_vhost is None or v == only_vhost

    queues = [{"name": q["name"], "vhost": q["vhost"], "durable": q["durable"], "auto_delete": q["auto_delete"],
               "arguments": q["arguments"]} for q in snap["queues"] if keep(q["vhost"]) and not q["exclusive"]]
    exchanges = [{"name": x["name"], "vhost": x["vhost"], "type": x["type"], "durable": x["durable"],
                  "auto_delete": x["auto_delete"], "internal": x["internal"], "arguments": x["arguments"]}
                 for x in snap["exchanges"] if keep(x["vhost"]) and not _builtin(x["name"])]
    bindings = [{k: b[k] for k in ("source", "vhost", "destination", "destination_type", "routing_key",
                                   "arguments")} for b in snap["bindings"] if keep(b["vhost"]) and b["source"]]
    out: dict[str, Any] = {"rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8", "product_name": "sansmq",
                           "product_version": "0.1.0", "queues": queues, "exchanges": exchanges,
                           "bindings": bindings, "policies": [], "parameters": [], "global_parameters": [],
                           "topic_permissions": []}
    if only_vhost is None:
        from .auth import user_tags
        out["users"] = [{"name": n, "password_hash": "", "hashing_algorithm": "rabbit_password_hashing_sha256",
                         "tags": list(user_tags(u)), "limits": {}} for n, u in config.users.items()]
        out["vhosts"] = [{"name": v, "description": "", "tags": [], "metadata": {}} for v in snap["vhosts"]]
        out["permissions"] = [{"user": n, "vhost": v, "configure": ".*", "write": ".*", "read": ".*"}
                              for n, u in config.users.items() for v in (u.vhosts or snap["vhosts"])]
    return out


def import_definitions(broker: Any, config: Any, defs: dict[str, Any], only_vhost: str | None = None) -> None:
    """Declare what ``defs`` lists (run on the broker's thread). Raises ValueError/KeyError on a
    malformed file before changing anything it cannot."""
    model = broker.model
    for section in ("vhosts", "queues", "exchanges", "bindings", "users", "permissions"):
        if not isinstance(defs.get(section, []), list):
            raise ValueError(f"'{section}' must be a list")

    def vhost_of(item: dict[str, Any]) -> Any:
        name = only_vhost if only_vhost is not None else item["vhost"]
        return model.vhosts.get(name) or model.add_vhost(name)

    if only_vhost is None:
        for v in defs.get("vhosts", []):
            model.add_vhost(v["name"])
        for u in defs.get("users", []):
            # only clear-text passwords can be honoured until the users model keeps hashes
            old = config.users.get(u["name"])
            if "password" in u:
                config.users[u["name"]] = User(u["name"], u["password"])
            elif old is None:
                raise ValueError(f"user '{u['name']}': password hashes are not supported yet")
    for x in defs.get("exchanges", []):
        if not _builtin(x["name"]):
            model.declare_exchange(vhost_of(x), x["name"], x["type"], bool(x.get("durable", True)),
                                   bool(x.get("auto_delete", False)), bool(x.get("internal", False)),
                                   x.get("arguments") or None)
    for q in defs.get("queues", []):
        model.declare_queue(vhost_of(q), q["name"], bool(q.get("durable", True)), bool(q.get("auto_delete", False)),
                            None, q.get("arguments") or None)
    for b in defs.get("bindings", []):
        v = vhost_of(b)
        source = v.exchanges[b["source"]]
        dest = v.queues[b["destination"]] if b.get("destination_type", "queue") == "queue" else v.exchanges[
            b["destination"]]
        model.bind(v, dest, source, b.get("routing_key", ""), b.get("arguments") or None)
