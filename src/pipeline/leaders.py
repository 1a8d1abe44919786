"""Which node of a cluster leads each stream, so that the Spark source reads it there.

Given several hosts (``amqp://user:pass@h1:5672,h2:5673,h3:5674/vhost``: a cluster's nodes), the
driver connects to each host once: a sansmq cluster node names itself in AMQP's connection.start
(server property ``node``, with its management API's port, ``management_port``). It then asks one
node's management API for the vhost's queues (``/api/queues/VHOST``: ``node`` is where each queue's
leader runs, as in RabbitMQ) and gives each stream a URL whose host list starts with its leader's
host, the other hosts after it. A task connects there; when the leader is down the client goes on
to the next host (every node can read every stream), so a stale answer costs a hop, never data.

With one host, or brokers that do not name their nodes (RabbitMQ, a lone sansmq), or a lookup
that fails, streams keep the URL as given (logged): reading works from any node.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from base64 import b64encode
from urllib.parse import quote, urlsplit, urlunsplit

from sansmq_client import ClientError

from .driver import Driver, endpoint

__all__ = ["leader_urls"]

log = logging.getLogger("sansmq.pipeline")


def _with_first(url: str, first: int) -> str:
    """``url`` with its ``first``-th host moved to the front of its host list."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    hosts = hostlist.split(",")
    hosts.insert(0, hosts.pop(first))
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{','.join(hosts)}"))


def _nodes(url: str, timeout: float) -> tuple[dict[str, int], tuple[str, int] | None]:
    """node name -> index of its host in ``url``; one node's management API address."""
    ep = endpoint(url)
    nodes: dict[str, int] = {}
    api = None
    for i, (host, port) in enumerate(ep.hosts):
        try:
            with Driver(url, timeout, hosts=((host, port),)) as client:
                props = client.server_properties
        except ClientError as exc:
            log.info("stream leaders: node at %s:%d not reached (%s)", host, port, exc)
            continue
        node, http = props.get("node"), props.get("management_port")
        if isinstance(node, (bytes, bytearray)):
            node = bytes(node).decode()
        if isinstance(node, str):
            nodes[node] = i
        if api is None and isinstance(http, int) and ep.tls is None:
            api = (host, http)
    return nodes, api


def leader_urls(url: str, streams: tuple[str, ...], timeout: float) -> dict[str, str]:
    """stream -> ``url`` with the host of the node leading it first, for the streams whose leader
    is one of ``url``'s hosts (the others read through ``url`` as given)."""
    ep = endpoint(url)
    if len(ep.hosts) < 2:
        return {}
    nodes, api = _nodes(url, timeout)
    if not nodes or api is None:
        log.info("stream leaders: the brokers do not name their nodes; reading through the hosts as given")
        return {}
    request = urllib.request.Request(
        f"http://{api[0]}:{api[1]}/api/queues/{quote(ep.vhost, safe='')}",
        headers={"Authorization": "Basic " + b64encode(f"{ep.user}:{ep.password}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            queues = json.loads(resp.read())
    except (OSError, ValueError) as exc:
        log.warning("stream leaders: %s:%d's management API did not answer (%s); reading through the hosts "
                    "as given", api[0], api[1], exc)
        return {}
    wanted = set(streams)
    return {q["name"]: _with_first(url, nodes[q["node"]]) for q in queues
            if q.get("name") in wanted and q.get("node") in nodes}
