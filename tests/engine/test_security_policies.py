"""Users, password hashes, permissions, policies and definitions in the model (no sockets)."""

from __future__ import annotations

import random

import pytest

from engine import Broker
from engine._message import Message
from engine.config import Config, User
from engine.model import NotFound, PreconditionFailed
from engine.model.policies import Policy, combine
from engine.model.security import Permission, UserRecord, check_password, hash_password
from engine.store import MemoryStore


def broker(**kw: object) -> Broker:
    return Broker(Config(**kw), MemoryStore(), random.Random(7))  # type: ignore[arg-type]


def test_hash_is_rabbitmqs_sha256_scheme():
    # the example of RabbitMQ's "Credentials and passwords" guide (salt 908D C60A, password test12)
    assert hash_password("test12", bytes.fromhex("908DC60A")) == "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
    assert check_password("kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", "rabbit_password_hashing_sha256",
                          "test12")
    assert not check_password("kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", "rabbit_password_hashing_sha256",
                              "test13")


@pytest.mark.parametrize("algorithm", ["rabbit_password_hashing_sha512", "rabbit_password_hashing_md5"])
def test_other_algorithms_are_accepted(algorithm):
    h = hash_password("s3cret", b"\x01\x02\x03\x04", algorithm)
    assert UserRecord("u", h, algorithm).check("s3cret")
    assert not UserRecord("u", h, algorithm).check("s3cre")
    assert not UserRecord("u", h, "rabbit_password_hashing_sha256").check("s3cret")


def test_empty_hash_and_garbage_never_match():
    assert not check_password("", "rabbit_password_hashing_sha256", "")
    assert not check_password("!!not base64!!", "rabbit_password_hashing_sha256", "x")
    with pytest.raises(PreconditionFailed):
        UserRecord.from_json({"name": "u", "password_hash": "", "hashing_algorithm": "rabbit_password_hashing_bcrypt"})


def test_config_users_bootstrap_with_full_permissions_on_their_vhosts():
    b = broker(users={"guest": User("guest", "guest", True), "app": User("app", "pw", vhosts=("a",))},
               vhosts=("/", "a", "b"))
    sec = b.model.security
    assert sec.authenticate("app", "pw") is not None and sec.authenticate("app", "nope") is None
    assert sec.can_access_vhost("app", "a") and not sec.can_access_vhost("app", "b")
    assert all(sec.can_access_vhost("guest", v) for v in ("/", "a", "b"))
    assert sec.loopback_users == {"guest"}


def test_the_stored_user_wins_over_the_config_file():
    store = MemoryStore()
    b = Broker(Config(), store, random.Random(1))
    b.add_user("guest", "changed")
    again = Broker(Config(), store, random.Random(1))
    assert again.model.security.authenticate("guest", "changed") is not None
    assert again.model.security.authenticate("guest", "guest") is None


def test_permissions_are_regex_searches_and_empty_grants_nothing():
    p = Permission("u", "/", "^u-", "", ".*")
    assert p.allows("configure", "u-q") and not p.allows("configure", "x-u-q")
    assert not p.allows("write", "anything") and not p.allows("write", "")
    assert p.allows("read", "amq.gen-abc")
    assert Permission("u", "/", "q", "q", "q").allows("read", "my-q-1")  # unanchored, as re:run
    with pytest.raises(PreconditionFailed):
        Permission("u", "/", "(", ".*", ".*")


def test_deleting_a_user_drops_its_permissions():
    b = broker()
    b.add_user("u", "p")
    b.set_permissions("u", "/", ".*", ".*", ".*")
    b.delete_user("u")
    assert b.model.security.permission("u", "/") is None
    with pytest.raises(NotFound):
        b.delete_user("u")
    with pytest.raises(NotFound):
        b.set_permissions("u", "nowhere", ".*", ".*", ".*")


def _fill(b: Broker, q, n: int) -> None:
    v = b.model.vhosts["/"]
    for i in range(n):
        b.model.publish(v, "", Message(b.model.next_message_id(), "", q.name, {}, b"m%d" % i))


def test_a_policy_trims_an_existing_queue_at_once_and_new_queues_get_it():
    b = broker()
    v = b.model.vhosts["/"]
    q = b.model.declare_queue(v, "orders")
    _fill(b, q, 10)
    b.set_policy(Policy("/", "cap", "^ord", {"max-length": 3}))
    assert q.policy == "cap" and q.count == 3
    assert [e.msg.body for e in q.ready_entries()] == [b"m7", b"m8", b"m9"]  # drop-head
    new = b.model.declare_queue(v, "ordinals")
    assert new.policy == "cap" and new.args == {"x-max-length": 3} and new.declared_args is None
    b.delete_policy("/", "cap")
    assert q.policy is None and q.args is None


def test_reject_publish_policy_does_not_trim():
    b = broker()
    q = b.model.declare_queue(b.model.vhosts["/"], "q")
    _fill(b, q, 5)
    b.set_policy(Policy("/", "cap", ".*", {"max-length": 2, "overflow": "reject-publish"}, apply_to="queues"))
    assert q.count == 5


def test_combining_policy_and_arguments():
    declared = {"x-max-length": 10, "x-dead-letter-exchange": "mine", "x-message-ttl": 1000}
    out = combine(declared, {"max-length": 20, "dead-letter-exchange": "theirs", "message-ttl": 500, "expires": 9})
    assert out == {"x-max-length": 10, "x-dead-letter-exchange": "mine", "x-message-ttl": 500, "x-expires": 9}


def test_priority_then_name_decide_which_policy_applies():
    b = broker()
    q = b.model.declare_queue(b.model.vhosts["/"], "q1")
    b.set_policy(Policy("/", "low", "^q", {"max-length": 1}, priority=1))
    b.set_policy(Policy("/", "high", "^q1$", {"max-length": 2}, priority=5))
    assert q.policy == "high"
    b.set_policy(Policy("/", "exchanges-only", "^q", {"alternate-exchange": "ae"}, priority=9, apply_to="exchanges"))
    assert q.policy == "high"
    b.set_policy(Policy("/", "a-tie", "^q", {"max-length": 4}, priority=5))
    assert q.policy == "a-tie"


@pytest.mark.parametrize("definition", [{"max-length": -1}, {"overflow": "explode"}, {"no-such-key": 1},
                                        {"expires": 0}, {}])
def test_invalid_policies_are_refused(definition):
    with pytest.raises(PreconditionFailed):
        Policy("/", "p", ".*", definition)


def test_the_declared_arguments_stay_for_equivalence_checks_and_the_store():
    b = broker()
    store = b.store
    b.set_policy(Policy("/", "ttl", ".*", {"message-ttl": 100}))
    q = b.model.declare_queue(b.model.vhosts["/"], "d", durable=True, args={"x-max-length": 7})
    assert q.args == {"x-max-length": 7, "x-message-ttl": 100} and q.declared_args == {"x-max-length": 7}
    assert store.recover().queues[0].args == {"x-max-length": 7}


def test_vhost_delete_takes_its_queues_permissions_and_policies():
    b = broker()
    b.add_vhost("v")
    b.add_user("u", "p")
    b.set_permissions("u", "v", ".*", ".*", ".*")
    b.set_policy(Policy("v", "p", ".*", {"max-length": 1}))
    b.model.declare_queue(b.model.vhosts["v"], "q", durable=True)
    b.delete_vhost("v")
    assert "v" not in b.model.vhosts and b.model.security.permission("u", "v") is None
    assert b.model.policies.in_vhost("v") == []
    assert b.store.recover().queues == []


def test_definitions_round_trip_into_a_fresh_broker():
    b = broker()
    b.add_user("app", "pw", ("management",))
    b.add_vhost("shop")
    b.set_permissions("app", "shop", "^app-", ".*", ".*")
    v = b.model.vhosts["shop"]
    b.model.declare_exchange(v, "orders", "topic")
    b.model.declare_queue(v, "app-orders", durable=True, args={"x-max-length": 100})
    b.model.declare_queue(v, "transient")  # not durable: not exported
    b.model.bind(v, v.queues["app-orders"], v.exchanges["orders"], "order.*")
    b.set_policy(Policy("shop", "dlx", "^app-", {"dead-letter-exchange": "dead"}, priority=2, apply_to="queues"))
    exported = b.export_definitions()
    assert [q["name"] for q in exported["queues"]] == ["app-orders"]
    fresh = broker()
    assert fresh.import_definitions(exported) == []
    assert fresh.export_definitions() == exported
    assert fresh.model.security.authenticate("app", "pw") is not None
    assert fresh.model.vhosts["shop"].queues["app-orders"].policy == "dlx"


def test_import_skips_what_sansmq_does_not_have_with_a_note():
    b = broker()
    notes = b.import_definitions({"parameters": [{"value": {}, "vhost": "/", "component": "federation-upstream",
                                                  "name": "up"}],
                                  "global_parameters": [{"name": "cluster_name", "value": "x"}]})
    assert any("parameters" in n for n in notes) and any("global_parameters" in n for n in notes)
    with pytest.raises(PreconditionFailed):
        b.import_definitions({"users": [{"no": "name"}]})


def test_an_exchange_policy_gives_an_alternate_exchange_the_argument_wins():
    b = broker()
    v = b.model.vhosts["/"]
    ev = b.model.declare_exchange(v, "ex.events", "direct")
    own = b.model.declare_exchange(v, "ex.own", "direct", args={"alternate-exchange": "mine"})
    b.model.declare_queue(v, "unrouted")
    b.model.bind(v, v.queues["unrouted"], b.model.declare_exchange(v, "unrouted", "fanout"), "")
    b.set_policy(Policy("/", "ae", r"^ex\.", {"alternate-exchange": "unrouted"}, apply_to="exchanges"))
    assert ev.policy == "ae" and ev.alternate == "unrouted" and own.alternate == "mine"
    b.model.publish(v, "ex.events", Message(b.model.next_message_id(), "ex.events", "nobody", {}, b"lost?"))
    assert v.queues["unrouted"].count == 1
    b.delete_policy("/", "ae")
    assert ev.alternate is None and ev.policy is None


# -- property: whatever the order of policy changes and declarations, every queue ends up with the
# -- policy a brute-force resolution picks and the arguments combine() gives ----------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = ["a1", "a2", "b1", "ab"]
PATTERNS = ["^a", "1$", "b", "^ab$", ".*"]
op = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(["p", "q", "r"]), st.sampled_from(PATTERNS), st.integers(0, 3),
              st.integers(0, 20), st.sampled_from(["all", "queues", "exchanges"])),
    st.tuples(st.just("delete"), st.sampled_from(["p", "q", "r"])),
    st.tuples(st.just("declare"), st.sampled_from(NAMES), st.sampled_from([None, 5, 50])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_policy_resolution_matches_brute_force(ops):
    b = broker()
    v = b.model.vhosts["/"]
    live: dict[str, Policy] = {}
    for o in ops:
        if o[0] == "set":
            _, name, pattern, prio, cap, apply_to = o
            live[name] = b.set_policy(Policy("/", name, pattern, {"max-length": cap}, prio, apply_to))
        elif o[0] == "delete":
            if o[1] in live:
                b.delete_policy("/", live.pop(o[1]).name)
        elif o[1] not in v.queues:
            b.model.declare_queue(v, o[1], args=None if o[2] is None else {"x-max-length": o[2]})
    import re
    for q in v.queues.values():
        fits = [p for p in live.values() if p.apply_to != "exchanges" and re.search(p.pattern, q.name)]
        best = max(fits, key=lambda p: (p.priority, [-ord(c) for c in p.name]), default=None)
        assert q.policy == (best.name if best else None)
        assert q.args == (combine(q.declared_args, best.definition) if best else q.declared_args)


def test_a_config_user_deleted_through_the_api_stays_deleted():
    store = MemoryStore()
    config = Config(users={"guest": User("guest", "guest", True), "app": User("app", "pw")})
    b = Broker(config, store, random.Random(1))
    b.delete_user("app")
    again = Broker(config, store, random.Random(1))
    assert "app" not in again.model.security.users and again.model.security.permission("app", "/") is None
    later = Config(users={**config.users, "new": User("new", "pw2")})
    third = Broker(later, store, random.Random(1))  # a user added to the config file later is seeded
    assert third.model.security.authenticate("new", "pw2") is not None and "app" not in third.model.security.users


def test_topic_permissions_match_routing_keys_with_variables():
    from engine.model.security import TopicPermission

    tp = TopicPermission("u", "/", "amq.topic", "^{username}\\.|^{client_id}\\.", "")
    assert tp.allows("write", "u.a", {"username": "u", "vhost": "/"})
    assert not tp.allows("write", "x.a", {"username": "u", "vhost": "/"})
    assert tp.allows("write", "dev.a", {"username": "u", "vhost": "/", "client_id": "dev"})
    # an empty pattern is RabbitMQ's ^$: only the empty routing key
    assert tp.allows("read", "", {}) and not tp.allows("read", "a", {})
    with pytest.raises(PreconditionFailed):
        TopicPermission("u", "/", "amq.topic", "(", ".*")


def test_topic_permissions_persist_export_import_and_go_with_their_user_and_vhost():
    store = MemoryStore()
    b = Broker(Config(vhosts=("/", "v2")), store, random.Random(1))
    b.add_user("u", "p")
    b.set_topic_permission("u", "/", "amq.topic", "^a", "^b")
    b.set_topic_permission("u", "v2", "t2", "^c", "")
    again = Broker(Config(vhosts=("/", "v2")), store, random.Random(1))  # restored from the store
    assert set(again.model.security.topic_permissions) == {("/", "u", "amq.topic"), ("v2", "u", "t2")}
    exported = again.export_definitions()["topic_permissions"]
    assert {"user": "u", "vhost": "/", "exchange": "amq.topic", "write": "^a", "read": "^b"} in exported
    fresh = broker(vhosts=("/", "v2"))
    fresh.import_definitions({"users": again.export_definitions()["users"], "topic_permissions": exported})
    assert fresh.model.security.topic_permissions[("/", "u", "amq.topic")].write == "^a"
    again.delete_vhost("v2")
    assert set(again.model.security.topic_permissions) == {("/", "u", "amq.topic")}
    again.delete_user("u")
    assert again.model.security.topic_permissions == {}
    assert Broker(Config(vhosts=("/", "v2")), store, random.Random(1)).model.security.topic_permissions == {}


def test_topic_permission_variables_are_substituted_literally_and_quickly():
    """A client_id (or user name) full of regex syntax is matched as text: RabbitMQ substitutes it
    literally. Unescaped, ``(a+)+$`` made one publish backtrack for minutes."""
    import time

    from engine.model.security import Security, TopicPermission, UserAccess

    sec = Security(MemoryStore())
    tp = TopicPermission("u", "/", "amq.topic", "^{client_id}\\.", "")
    access = UserAccess(sec, "u", "/", client_id="(a+)+$")
    started = time.perf_counter()
    assert not access.topic_allows(tp, "write", "a" * 40 + "!")
    assert time.perf_counter() - started < 0.5
    assert access.topic_allows(tp, "write", "(a+)+$.reading")  # the literal text
    assert not access.topic_allows(tp, "write", "aaa.reading")  # not the regex
    assert tp.allows("write", "(a+)+$.x", {"client_id": "(a+)+$"})


@pytest.mark.parametrize("pattern", ["^(a+)+$", "(\\w*)*x", "^(x|y+)*$", "(a{2,5})+"])
def test_patterns_whose_matching_time_can_explode_are_refused_when_set(pattern):
    from engine.model.security import TopicPermission

    b = Broker(Config(), MemoryStore(), random.Random(1))
    with pytest.raises(PreconditionFailed, match="nests a repeat"):
        b.set_permissions("guest", "/", ".*", pattern, ".*")
    with pytest.raises(PreconditionFailed, match="nests a repeat"):
        TopicPermission("u", "/", "amq.topic", pattern, "")
    # ordinary patterns, repeats side by side or of a fixed count, still pass
    for fine in ("^app-", ".*", "^(amq\\.gen-[a-z]+)?$", "^(a|b)*x", "(ab){3}", "^{username}\\.|^{client_id}\\."):
        b.set_permissions("guest", "/", fine, fine, fine)
