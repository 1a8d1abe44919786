"""Policies (RabbitMQ's): named, per-vhost sets of queue settings matched to queues and exchanges by a
regular expression over their names, applied to existing and new ones at once.

Only one policy applies to an object: the matching one of highest priority (ties: the name that sorts
first, so the choice never depends on insertion order). A queue's effective arguments combine its
declared ``x-`` arguments with the policy's definition as RabbitMQ's "Combining policies and
x-arguments" says: for the numeric limits (max-length, max-length-bytes, message-ttl, expires,
delivery-limit) the lower value wins (a negative delivery-limit, none, loses to any), for the others
(overflow, dead-letter-exchange, dead-letter-routing-key, dead-letter-strategy) the queue argument wins.
Apply-to ``classic_queues``, ``quorum_queues`` or ``streams`` selects one queue type. Keys of features
sansmq does not have (queue-mode, ha-*, queue-version, ...) are accepted and ignored with a logged
warning, as clients and exported definitions still carry them; an unknown key is refused as RabbitMQ refuses it.

Durable through the store's documents: kind ``policy``, keyed ``["vhost", "name"]``, the JSON object in
the definitions file's shape.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..store import Store
from .errors import NotFound, PreconditionFailed
from .objects import _OVERFLOW, DEAD_LETTER_STRATEGIES, LOCATORS, Exchange, Queue, VHost, queue_type_of
from .queue_types import queue_type

__all__ = ["Policy", "Policies", "QUEUE_KEYS", "IGNORED_KEYS", "APPLY_TO", "declared_locator"]

log = logging.getLogger("sansmq.engine")

POLICY_DOC = "policy"
#: policy key -> (queue argument, True when the lower of policy and argument wins)
QUEUE_KEYS: dict[str, tuple[str, bool]] = {
    "max-length": ("x-max-length", True),
    "max-length-bytes": ("x-max-length-bytes", True),
    "message-ttl": ("x-message-ttl", True),
    "expires": ("x-expires", True),
    "delivery-limit": ("x-delivery-limit", True),
    "overflow": ("x-overflow", False),
    "dead-letter-exchange": ("x-dead-letter-exchange", False),
    "dead-letter-routing-key": ("x-dead-letter-routing-key", False),
    "dead-letter-strategy": ("x-dead-letter-strategy", False),
}
#: keys exchanges take (the exchange argument wins)
EXCHANGE_KEYS = {"alternate-exchange": "alternate-exchange"}
#: RabbitMQ keys for features sansmq has not: accepted, ignored, logged
IGNORED_KEYS = frozenset((
    "queue-mode", "queue-version", "queue-master-locator", "ha-mode", "ha-params",
    "ha-sync-mode", "ha-sync-batch-size", "ha-promote-on-shutdown", "ha-promote-on-failure",
    "max-age", "stream-max-segment-size-bytes", "initial-cluster-size", "federation-upstream",
    "federation-upstream-set", "single-active-consumer", "consumer-timeout", "max-in-memory-length",
    "max-in-memory-bytes", "delivery-limit-strategy",
))
APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
_POSITIVE = ("expires",)  # RabbitMQ refuses expires 0
#: the queue type each queue-specific apply-to value selects (model.queue_types.queue_type)
_APPLY_TO_TYPE = {"classic_queues": "classic", "quorum_queues": "quorum", "streams": "stream"}


@dataclass(slots=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"
    _rx: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._rx = _validate(self)

    def applies_to_queues(self, qtype: str) -> bool:
        """Whether the policy applies to queues of type ``qtype`` (``classic_queues`` only to
        classic ones, ``quorum_queues`` to quorum ones, ``streams`` to streams)."""
        if self.apply_to in _APPLY_TO_TYPE:
            return _APPLY_TO_TYPE[self.apply_to] == qtype
        return self.apply_to != "exchanges"

    def applies_to_exchanges(self) -> bool:
        return self.apply_to in ("all", "exchanges")

    def matches(self, name: str) -> bool:
        assert self._rx is not None
        return self._rx.search(name) is not None

    def to_json(self) -> dict[str, Any]:
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern, "apply-to": self.apply_to,
                "definition": dict(self.definition), "priority": self.priority}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Policy:
        try:
            return cls(str(d["vhost"]), str(d["name"]), str(d["pattern"]), dict(d.get("definition") or {}),
                       int(d.get("priority", 0)), str(d.get("apply-to", "all")))
        except (KeyError, TypeError, ValueError) as exc:
            raise PreconditionFailed(f"malformed policy {d!r}: {exc}") from None


def _validate(p: Policy) -> re.Pattern[str]:
    if p.apply_to not in APPLY_TO:
        raise PreconditionFailed(f"'{p.apply_to}' is not a valid apply-to value")
    if not p.definition:
        raise PreconditionFailed("a policy's definition must not be empty")
    for key, value in p.definition.items():
        if key in IGNORED_KEYS:
            continue
        if key in EXCHANGE_KEYS or key in ("dead-letter-exchange", "dead-letter-routing-key"):
            if not isinstance(value, str):
                raise PreconditionFailed(f"{key} must be a string, not {value!r}")
        elif key == "dead-letter-strategy":
            if value not in DEAD_LETTER_STRATEGIES:
                raise PreconditionFailed(f"{value!r} is not a valid dead-letter-strategy value")
        elif key == "delivery-limit":  # negative: no limit (RabbitMQ 4's -1)
            if type(value) is not int:
                raise PreconditionFailed(f"delivery-limit must be an integer, not {value!r}")
        elif key == "queue-leader-locator":  # where a cluster places a new queue's leader (placement)
            if value not in LOCATORS["x-queue-leader-locator"]:
                raise PreconditionFailed(f"{value!r} is not a valid queue-leader-locator value")
        elif key == "overflow":
            if value not in _OVERFLOW:
                raise PreconditionFailed(f"{value!r} is not a valid overflow value")
        elif key in QUEUE_KEYS:
            if type(value) is not int or value < (1 if key in _POSITIVE else 0):
                raise PreconditionFailed(f"{key} must be a {'positive' if key in _POSITIVE else 'non-negative'} "
                                         f"integer, not {value!r}")
        else:
            raise PreconditionFailed(f"Validation failed: [{{<<\"{key}\">>, ...}}] are not recognised policy keys")
    try:
        return re.compile(p.pattern)
    except re.error as exc:
        raise PreconditionFailed(f"invalid regular expression '{p.pattern}': {exc}") from None


def combine(declared: dict[str, Any] | None, definition: dict[str, Any]) -> dict[str, Any] | None:
    """A queue's effective arguments under ``definition`` (see the module docstring)."""
    out = dict(declared or {})
    for key, value in definition.items():
        spec = QUEUE_KEYS.get(key)
        if spec is None:
            continue
        arg, lower_wins = spec
        mine = out.get(arg)
        if mine is None:
            out[arg] = value
        elif lower_wins and isinstance(mine, int) and _lower(key, value, mine):
            out[arg] = value
    return out or None


def _lower(key: str, policy: int, arg: int) -> bool:
    """Whether the policy's value wins over the queue argument's: the lower one, except that a
    negative delivery-limit (none) loses to any limit, as RabbitMQ 4 resolves them."""
    if key == "delivery-limit" and (policy < 0 or arg < 0):
        return policy > arg
    return policy < arg


class Policies:
    """The policies of every vhost and their application. ``on_queue_args`` is told when a queue's
    effective arguments changed (the model trims it, restarts its expiry countdown)."""

    def __init__(self, store: Store, vhosts: dict[str, VHost],
                 on_queue_args: Callable[[Queue, dict[str, Any] | None, dict[str, Any] | None], None]) -> None:
        self.store = store
        self.vhosts = vhosts
        self.on_queue_args = on_queue_args
        #: (vhost, name) -> policy
        self.policies: dict[tuple[str, str], Policy] = {}
        self._warned: set[tuple[str, str, str]] = set()

    def put(self, policy: Policy, persist: bool = True) -> Policy:
        self.policies[(policy.vhost, policy.name)] = policy
        for key in policy.definition:
            if key in IGNORED_KEYS and (policy.vhost, policy.name, key) not in self._warned:
                self._warned.add((policy.vhost, policy.name, key))
                log.warning("policy '%s' in vhost '%s': key '%s' is ignored (sansmq has no such feature)",
                            policy.name, policy.vhost, key)
        if persist:
            self.store.put_doc(POLICY_DOC, _key(policy.vhost, policy.name), json.dumps(policy.to_json()))
        self.apply_vhost(policy.vhost)
        return policy

    def delete(self, vhost: str, name: str) -> None:
        if self.policies.pop((vhost, name), None) is None:
            raise NotFound(f"no policy '{name}' in vhost '{vhost}'")
        self.store.delete_doc(POLICY_DOC, _key(vhost, name))
        self.apply_vhost(vhost)

    def forget_vhost(self, vhost: str) -> None:
        for v, name in [k for k in self.policies if k[0] == vhost]:
            self.delete(v, name)

    def in_vhost(self, vhost: str | None = None) -> list[Policy]:
        return [p for p in self.policies.values() if vhost is None or p.vhost == vhost]

    def leader_locator(self, vhost: str, name: str, args: dict[str, Any] | None) -> str | None:
        """Where a cluster places the leader of queue ``name`` declared with ``args``: the
        ``x-queue-leader-locator`` argument (or the legacy ``x-queue-master-locator``) wins over the
        ``queue-leader-locator`` key of the policy that applies (RabbitMQ 3.10+); None: client-local."""
        declared = declared_locator(vhost, name, args)
        if declared is not None:
            return declared
        policy = self.best(vhost, name, queue_type_of(args))
        return None if policy is None else policy.definition.get("queue-leader-locator")

    def best(self, vhost: str, name: str, qtype: str | None) -> Policy | None:
        """The policy that applies to the queue of type ``qtype`` (or the exchange, when None)
        ``name`` in ``vhost``."""
        best: Policy | None = None
        for p in self.policies.values():
            if p.vhost != vhost or not (p.applies_to_queues(qtype) if qtype else p.applies_to_exchanges()):
                continue
            if not p.matches(name):
                continue
            if best is None or p.priority > best.priority or (p.priority == best.priority and p.name < best.name):
                best = p
        return best

    # -- application -----------------------------------------------------------------------------
    def apply_vhost(self, vhost: str) -> None:
        v = self.vhosts.get(vhost)
        if v is None:
            return
        for q in list(v.queues.values()):
            self.apply_queue(q)
        for x in v.exchanges.values():
            self.apply_exchange(x)

    def apply_all(self) -> None:
        for name in list(self.vhosts):
            self.apply_vhost(name)

    def apply_queue(self, q: Queue) -> None:
        if q.vhost.queues.get(q.name) is not q:
            return
        declared = q.declared_args
        policy = self.best(q.vhost.name, q.name, queue_type(q))
        before = q.args
        if policy is None:
            if q.policy is None:
                return
            q.policy = None
            q._declared = None
            q.args = declared
        else:
            q._declared = declared
            q.policy = policy.name
            q.args = combine(declared, policy.definition)
        if q.args != before:
            self.on_queue_args(q, before, q.args)

    def apply_exchange(self, x: Exchange) -> None:
        if x.name == "" or x.name.startswith("amq."):
            return  # RabbitMQ applies no policy to the default and amq.* exchanges
        policy = self.best(x.vhost.name, x.name, None)
        x.policy = None if policy is None else policy.name
        args = x.args
        if args and "alternate-exchange" in args:
            return  # the exchange's own argument wins
        ae = None if policy is None else policy.definition.get("alternate-exchange")
        x.alternate = None if ae is None else str(ae)

    # -- recovery --------------------------------------------------------------------------------
    def restore(self, docs: dict[tuple[str, str], str]) -> None:
        for (kind, _), doc in docs.items():
            if kind == POLICY_DOC:
                policy = Policy.from_json(json.loads(doc))
                self.policies[(policy.vhost, policy.name)] = policy


def declared_locator(vhost: str, name: str, args: dict[str, Any] | None) -> str | None:
    """The leader locator queue ``name``'s declare arguments ask for (the legacy master one too)."""
    locator = (args or {}).get("x-queue-leader-locator") or (args or {}).get("x-queue-master-locator")
    return None if locator is None else str(locator)


def _key(vhost: str, name: str) -> str:
    return json.dumps([vhost, name])
