"""Cluster operations on the database (``sansmq cluster drain/revive/rebalance``), as RabbitMQ's
``rabbitmq-upgrade drain``/``revive`` and ``rabbitmq-queues rebalance``.

They only write the database: a node marked ``drained`` hands its leases over in its next
membership round (as a shutdown does) and takes none; a lease given a ``target`` is taken by that
node in its next round (epoch + 1, the queue loaded from the database as in a failover; the old
leader is fenced off and steps down). Nothing here is on any node's message path.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from ...store import StoreError
from ._cluster_sql import cluster_statements
from .cluster import cluster_view
from .store import CONNECT_KW, _reason

__all__ = ["Move", "drain", "revive", "rebalance", "plan_balance", "wait_moved"]


@dataclass(slots=True, frozen=True)
class Move:
    """Queue ``queue`` of ``vhost`` (lease ``qid``) handed from ``source`` to ``target``."""

    vhost: str
    queue: str
    qid: int
    source: str
    target: str


def _live(view: dict[str, Any]) -> list[str]:
    """The nodes that may lead: running and not drained."""
    return [n["name"] for n in view["nodes"] if n["running"] and not n["drained"]]


def plan_balance(leases: list[dict[str, Any]], nodes: list[str], counted: list[dict[str, Any]] | None = None
                 ) -> list[Move]:
    """Moves that leave each of ``nodes`` leading about as many of ``leases`` as the others (at
    most one apart): the leases of other nodes (drained, down) go to the least loaded, then the
    most loaded node gives to the least until balanced. ``counted``: leases only counted as load
    (a drain spreads one node's queues over what the others lead already)."""
    if not nodes:
        return []
    by_node: dict[str, list[dict[str, Any]]] = {n: [] for n in nodes}
    extra = {n: 0 for n in nodes}
    for lease in counted or ():
        if lease["leader"] in extra:
            extra[lease["leader"]] += 1
    homeless: list[dict[str, Any]] = []
    for lease in leases:
        (by_node[lease["leader"]] if lease["leader"] in by_node else homeless).append(lease)

    def load(n: str) -> tuple[int, str]:
        return len(by_node[n]) + extra[n], n

    moved: dict[int, Move] = {}
    for lease in homeless:
        target = min(nodes, key=load)
        by_node[target].append(lease)
        moved[lease["id"]] = Move(lease["vhost"], lease["queue"], lease["id"], lease["leader"], target)
    if counted is None:
        while True:
            hi, lo = max(nodes, key=load), min(nodes, key=load)
            if load(hi)[0] - load(lo)[0] <= 1:
                break
            lease = by_node[hi].pop(0)  # its own first: a queue just placed there is not moved twice
            by_node[lo].append(lease)
            moved[lease["id"]] = Move(lease["vhost"], lease["queue"], lease["id"], lease["leader"], lo)
    return [m for m in moved.values() if m.source != m.target]


def _apply(dsn: str, schema: str, moves: list[Move], drained: tuple[str, bool] | None = None) -> None:
    c = cluster_statements(schema)
    try:
        with psycopg.connect(dsn, autocommit=True, **CONNECT_KW) as conn, conn.transaction():
            if drained is not None and conn.execute(c["set_drained"], (drained[1], drained[0])).fetchone() is None:
                raise StoreError(f"no cluster node named {drained[0]!r}")
            for m in moves:
                conn.execute(c["lease_target"], (m.target, m.qid, m.source))
    except psycopg.Error as exc:
        raise StoreError(f"cluster: {_reason(exc)}") from None


def drain(dsn: str, node: str, schema: str = "sansmq") -> list[Move]:
    """Put ``node`` in maintenance: every queue it leads goes to the least loaded live node, and it
    leads none until revived. Refused when no other live node could lead them."""
    view = cluster_view(dsn, schema)
    if node not in {n["name"] for n in view["nodes"]}:
        raise StoreError(f"no cluster node named {node!r}")
    others = [n for n in _live(view) if n != node]
    mine = [lease for lease in view["leases"] if lease["leader"] == node]
    if mine and not others:
        raise StoreError(f"node {node!r} leads {len(mine)} queues and no other node is running and not drained")
    counted = [lease for lease in view["leases"] if lease["leader"] != node]
    moves = plan_balance(mine, others, counted)
    _apply(dsn, schema, moves, (node, True))
    return moves


def revive(dsn: str, node: str, schema: str = "sansmq") -> None:
    """``node`` may lead queues again (new ones, failovers; ``rebalance`` gives it its share)."""
    _apply(dsn, schema, [], (node, False))


def rebalance(dsn: str, vhost: str | None = None, queues: str | None = None, schema: str = "sansmq"
              ) -> list[Move]:
    """Hand queues (of ``vhost``, named to match the regex ``queues``) over so the live, not drained
    nodes lead about as many of them each."""
    pattern = re.compile(queues) if queues else None
    view = cluster_view(dsn, schema)
    chosen = [lease for lease in view["leases"] if (vhost is None or lease["vhost"] == vhost)
              and (pattern is None or pattern.search(lease["queue"]))]
    moves = plan_balance(chosen, _live(view))
    _apply(dsn, schema, moves)
    return moves


def wait_moved(dsn: str, moves: list[Move], timeout: float, schema: str = "sansmq") -> list[Move]:
    """Wait until each move's target leads its queue; the moves still pending at ``timeout``."""
    deadline = time.monotonic() + timeout
    pending = list(moves)
    while pending:
        leaders = {lease["id"]: lease["leader"] for lease in cluster_view(dsn, schema)["leases"]}
        pending = [m for m in pending if m.qid in leaders and leaders[m.qid] != m.target]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return pending
