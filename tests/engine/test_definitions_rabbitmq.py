"""Importing a definitions file exported by RabbitMQ 3.10.8 (``rabbitmqctl export_definitions`` on a
private node: users with password hashes and tags, two vhosts, regex permissions, queue and exchange
policies, classic/priority/quorum queues, exchange-to-exchange and headers bindings, a vhost limit and
a global parameter), then exporting it again."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from engine import Broker
from engine.config import Config
from engine.model import PreconditionFailed
from engine.store import MemoryStore

EXPORT = json.loads((Path(__file__).parent / "data" / "rabbitmq-3.10-definitions.json").read_text())


def imported() -> tuple[Broker, list[str]]:
    b = Broker(Config(users={}), MemoryStore(), random.Random(0))
    return b, b.import_definitions(EXPORT)


def test_users_log_in_with_the_passwords_rabbitmq_hashed():
    b, _ = imported()
    sec = b.model.security
    assert sec.authenticate("app", "app-secret").tags == ("management", "policymaker")
    assert sec.authenticate("ops", "ops-secret").tags == ("administrator",)
    assert sec.authenticate("guest", "guest") is not None
    assert sec.authenticate("app", "ops-secret") is None


def test_permissions_and_vhosts():
    b, _ = imported()
    sec = b.model.security
    assert set(b.model.vhosts) >= {"/", "shop"}
    assert sec.allows("app", "shop", "write", "amq.default") and sec.allows("app", "shop", "write", "app-x")
    assert not sec.allows("app", "shop", "write", "amq.defaultx")  # anchored by the pattern's own ^...$
    assert not sec.allows("app", "shop", "configure", "orders") and not sec.can_access_vhost("app", "/")


def test_topology_and_policies_apply():
    b, _ = imported()
    shop, root = b.model.vhosts["shop"], b.model.vhosts["/"]
    orders = shop.queues["app-orders"]
    assert orders.declared_args == {"x-max-priority": 5}
    assert orders.policy == "dlx" and orders.args["x-dead-letter-exchange"] == "app-dead"
    assert orders.args["x-message-ttl"] == 60000
    assert shop.queues["app-dead-letters"].policy == "cap"
    assert shop.queues["app-dead-letters"].args == {"x-max-length": 1000, "x-overflow": "reject-publish"}
    assert root.exchanges["ex.events"].policy == "ae" and root.exchanges["ex.events"].type == "headers"
    assert shop.exchanges["app-dead"] in [d for d, _, _ in shop.exchanges["app-orders"].router.bindings()]
    assert ("ex.events" in root.exchanges
            and any(k == "" for _, k, _ in root.exchanges["ex.events"].router.bindings()))


def test_what_sansmq_has_not_is_named_in_the_notes():
    _, notes = imported()
    text = "\n".join(notes)
    assert "global_parameters: 1 entries ignored" in text
    assert not any(n.startswith("parameters:") for n in notes)  # the one parameter is a vhost limit
    assert "app-quorum" not in text  # a quorum queue is imported as one


def test_quorum_queue_is_imported_as_a_quorum_queue():
    b, _ = imported()
    q = b.model.vhosts["shop"].queues["app-quorum"]
    assert q.quorum and q.durable and q.declared_args == {"x-queue-type": "quorum"}
    assert [e for e in b.export_definitions()["queues"] if e["name"] == "app-quorum"][0]["arguments"] == \
        {"x-queue-type": "quorum"}


def test_vhost_and_user_limits_are_imported_and_exported_as_rabbitmq_writes_them():
    """Issue 23.8: RabbitMQ's vhost-limits parameter and users' limits were skipped."""
    doc = json.loads(json.dumps(EXPORT))
    doc["users"][0]["limits"] = {"max-connections": 3, "max-channels": 7}
    b = Broker(Config(users={}), MemoryStore(), random.Random(0))
    b.import_definitions(doc)
    limits = b.model.limits
    assert limits.of("vhost", "shop") == {"max-connections": 100}
    assert limits.of("user", doc["users"][0]["name"]) == {"max-connections": 3, "max-channels": 7}
    out = b.export_definitions()
    assert [p for p in out["parameters"] if p["component"] == "vhost-limits"] == EXPORT["parameters"]
    assert {v["name"]: v["limits"] for v in out["vhosts"]}["shop"] == [["max-connections", 100]]
    assert {u["name"]: u["limits"] for u in out["users"]}[doc["users"][0]["name"]] == doc["users"][0]["limits"]
    bad = json.loads(json.dumps(EXPORT))
    bad["parameters"][0]["value"] = {"max-sessions": 1}
    with pytest.raises(PreconditionFailed, match="unknown vhost limit 'max-sessions'"):
        Broker(Config(users={}), MemoryStore(), random.Random(0)).import_definitions(bad)


def test_export_after_import_keeps_everything_sansmq_has():
    b, _ = imported()
    out = b.export_definitions()
    for key in ("users", "permissions", "policies"):
        def canon(items):
            return sorted(json.dumps({k: v for k, v in i.items() if k != "limits"}, sort_keys=True) for i in items)
        assert canon(out[key]) == canon(EXPORT[key]), key
    assert {q["name"] for q in out["queues"]} == {q["name"] for q in EXPORT["queues"]}
    strip = [{k: v for k, v in x.items() if k in ("source", "destination", "destination_type", "routing_key",
                                                  "arguments", "vhost")} for x in EXPORT["bindings"]]
    def canon_bindings(items):
        return sorted(json.dumps(i, sort_keys=True) for i in items)
    assert canon_bindings(strip) == canon_bindings(out["bindings"])
    again = Broker(Config(users={}), MemoryStore(), random.Random(1))
    again.import_definitions(out)
    assert again.export_definitions() == out


def test_a_queue_typed_only_by_its_type_field_is_imported_as_that_type():
    b = Broker(Config(users={}), MemoryStore(), random.Random(0))
    notes = b.import_definitions({"queues": [
        {"name": "q1", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}, "type": "quorum"},
        {"name": "c1", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-queue-type": "classic"}, "type": "classic"}]})
    queues = b.model.vhosts["/"].queues
    assert not notes and queues["q1"].quorum and queues["q1"].declared_args == {"x-queue-type": "quorum"}
    assert not queues["c1"].quorum and queues["c1"].declared_args is None
