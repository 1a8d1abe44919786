"""Users, permissions, policies and vhosts survive a restart in both stores."""

from __future__ import annotations

import random

from engine import Broker
from engine.config import Config
from engine.model.policies import Policy


def test_security_and_policies_survive_a_restart(store_factory):
    store = store_factory.open()
    b = Broker(Config(), store, random.Random(3))
    b.add_user("app", "pw", ("monitoring",))
    b.add_user("gone", "x")
    b.add_vhost("shop")
    b.set_permissions("app", "shop", "^app-", "", ".*")
    b.set_permissions("gone", "shop", ".*", ".*", ".*")
    b.delete_user("gone")
    b.set_policy(Policy("shop", "cap", "^app-", {"max-length": 2}, priority=3, apply_to="queues"))
    b.set_policy(Policy("shop", "old", "^x", {"max-length": 9}))
    b.delete_policy("shop", "old")
    b.model.declare_queue(b.model.vhosts["shop"], "app-q", durable=True)
    exported = b.export_definitions()
    b.run_sync(1)
    b.close_store()

    again = Broker(Config(), store_factory.open(), random.Random(3))
    sec = again.model.security
    assert sec.authenticate("app", "pw").tags == ("monitoring",)
    assert "gone" not in sec.users and sec.permission("gone", "shop") is None
    assert sec.permission("app", "shop").configure == "^app-"
    assert [p.name for p in again.model.policies.in_vhost("shop")] == ["cap"]
    assert again.model.vhosts["shop"].queues["app-q"].policy == "cap"
    assert again.export_definitions() == exported
    again.close_store()
