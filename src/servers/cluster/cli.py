"""``sansmq cluster status`` and the cluster parts of ``sansmq serve`` (psycopg imported lazily)."""

from __future__ import annotations

import argparse
import json
import sys
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


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="{status}")
    status = sub.add_parser("status", help="nodes (address, heartbeat, running), queue leases (leader, epoch)")
    status.add_argument("--store", required=True, metavar="postgresql://USER@HOST:PORT/DB",
                        help="the database the cluster's nodes share")
    status.add_argument("--json", action="store_true", help="print the status as one JSON document")


def cluster_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from engine.storage.postgres.cluster import cluster_view

    try:
        view = cluster_view(args.store)
    except StoreError as exc:
        print(f"sansmq cluster: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if args.json:
        print(json.dumps(view, indent=2))
        return EXIT_OK
    print(f"{'node':<20} {'address':<22} {'state':<8} heartbeat age")
    for n in view["nodes"]:
        state = "running" if n["running"] else "down"
        print(f"{n['name']:<20} {n['address']:<22} {state:<8} {n['heartbeat_age']:.1f}s")
    print()
    print(f"{'vhost':<12} {'queue':<30} {'leader':<20} {'epoch':>6} expires in")
    for lease in view["leases"]:
        print(f"{lease['vhost']:<12} {lease['queue']:<30} {lease['leader']:<20} {lease['epoch']:>6} "
              f"{lease['expires_in']:.1f}s")
    return EXIT_OK
