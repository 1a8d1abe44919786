"""``sansmq cluster status`` and the cluster parts of ``sansmq serve`` (psycopg imported lazily)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from engine.config import Cluster
from engine.store import Store, StoreError

from .._driver import Listener
from .tls import LinkTls

__all__ = ["add_cluster_arguments", "cluster_command", "open_cluster_store", "attach_node", "LINK_PORT"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
#: the node-to-node link listener's default port (RabbitMQ's inter-node port)
LINK_PORT = 25672


def open_cluster_store(where: str | None, cluster: Cluster, listeners: list[Listener], *, sync: bool) -> Store:
    """The ``ClusterStore`` of node ``cluster.node`` on the PostgreSQL database ``where``
    (ValueError when ``where`` is not one); it advertises its link listener (among ``listeners``)."""
    from .._run import is_postgres_url

    if not is_postgres_url(where):
        raise ValueError("--node (a cluster node) needs a postgresql:// --store shared by every node")
    from engine.storage.postgres.cluster import ClusterStore

    link = next((f"{lst.host}:{lst.port}" for lst in listeners if lst.protocol == "cluster"), "")
    assert where is not None and cluster.node is not None
    return ClusterStore(where, cluster.node, address=link, lease=cluster.lease, sync=sync)



def attach_node(broker: Any, store: Any, tls: LinkTls | None = None) -> Callable[[Any], Any]:
    """Make ``broker`` (just restored from ``store``) a cluster node whose links to its peers use
    ``tls`` (None: plain TCP); returns the factory of its membership upkeep (``ClusterNode``) once
    the server is made."""
    from .node import ClusterNode, attach_cluster

    links = attach_cluster(broker, store, None if tls is None else tls.client)
    return lambda server: ClusterNode(store, server, links)


#: seconds ``drain`` and ``rebalance`` wait for the nodes to move the queues (``--timeout``)
MOVE_TIMEOUT = 60.0


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="{status,drain,revive,rebalance}")
    status = sub.add_parser("status", help="nodes (address, heartbeat, running, drained), queue leases "
                                           "(leader, epoch)")
    drain = sub.add_parser("drain", help="before maintenance: NODE hands every queue it leads to the other "
                                         "nodes and leads none until revived (rabbitmq-upgrade drain)")
    drain.add_argument("node", metavar="NODE")
    revive = sub.add_parser("revive", aliases=["undrain"], help="NODE may lead queues again (new ones, "
                                                                "failovers, rebalance)")
    revive.add_argument("node", metavar="NODE")
    rebalance = sub.add_parser("rebalance", help="move queue leaders so the running, not drained nodes lead "
                                                 "about as many each (rabbitmq-queues rebalance)")
    rebalance.add_argument("--vhost", metavar="V", help="only the queues of this vhost")
    rebalance.add_argument("--queues", metavar="REGEX", help="only the queues whose name matches")
    for cmd in (status, drain, revive, rebalance):
        cmd.add_argument("--store", required=True, metavar="postgresql://USER@HOST:PORT/DB",
                         help="the database the cluster's nodes share")
    status.add_argument("--json", action="store_true", help="print the status as one JSON document")
    for cmd in (drain, rebalance):
        cmd.add_argument("--timeout", type=float, default=MOVE_TIMEOUT, metavar="SECONDS",
                         help=f"wait this long for the nodes to move the queues (0: do not wait; default "
                              f"{MOVE_TIMEOUT:g})")


def cluster_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        if args.cluster_command == "status":
            return _status(args)
        return _operate(args)
    except StoreError as exc:
        print(f"sansmq cluster: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except re.error as exc:
        print(f"sansmq cluster: error: --queues: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _operate(args: argparse.Namespace) -> int:
    """drain, revive, rebalance: written to the database; the nodes move the queues in their
    membership round, which this waits for (``--timeout``), printing what moved."""
    from engine.storage.postgres import cluster_ops

    if args.cluster_command in ("revive", "undrain"):
        cluster_ops.revive(args.store, args.node)
        print(f"node {args.node} revived: it may lead queues again")
        return EXIT_OK
    began = time.monotonic()
    if args.cluster_command == "drain":
        moves = cluster_ops.drain(args.store, args.node)
        print(f"node {args.node} drained: it leads no queue until revived")
    else:
        moves = cluster_ops.rebalance(args.store, args.vhost, args.queues)
    for m in moves:
        print(f"{m.vhost:<12} {m.queue:<30} {m.source} -> {m.target}")
    pending = cluster_ops.wait_moved(args.store, moves, args.timeout) if args.timeout > 0 else moves
    if args.timeout <= 0:
        print(f"{len(moves)} queues to move (not waited for)")
        return EXIT_OK
    took = time.monotonic() - began
    if pending:
        print(f"{len(moves) - len(pending)} of {len(moves)} queues moved in {took:.2f}s; still pending: "
              + ", ".join(f"{m.vhost}/{m.queue}" for m in pending), file=sys.stderr)
        return EXIT_FAILURE
    print(f"{len(moves)} queues moved in {took:.2f}s")
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from engine.storage.postgres.cluster import cluster_view

    view = cluster_view(args.store)
    if args.json:
        print(json.dumps(view, indent=2))
        return EXIT_OK
    print(f"{'node':<20} {'address':<22} {'state':<17} heartbeat age")
    for n in view["nodes"]:
        state = ("running" if n["running"] else "down") + (", drained" if n["drained"] else "")
        print(f"{n['name']:<20} {n['address']:<22} {state:<17} {n['heartbeat_age']:.1f}s")
    print()
    print(f"{'vhost':<12} {'queue':<30} {'leader':<20} {'epoch':>6} expires in")
    for lease in view["leases"]:
        moving = f" (moving to {lease['target']})" if lease["target"] else ""
        print(f"{lease['vhost']:<12} {lease['queue']:<30} {lease['leader']:<20} {lease['epoch']:>6} "
              f"{lease['expires_in']:.1f}s{moving}")
    return EXIT_OK
