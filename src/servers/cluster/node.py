"""``ClusterNode``: the thread that keeps one node's membership current.

Every ``beat`` seconds (a third of the lease) it heartbeats, renews this node's leases and takes
over expired ones (their messages read back from the database); every ``poll`` seconds it reads the
definitions other nodes changed. What it learns is applied on the broker's loop thread
(``Driver.call_soon``) by ``engine.cluster``. A database that does not answer is logged and tried
again next round; leases then run out, and other nodes take this node's queues (a write this node
would still make is fenced off).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

from engine._broker import register_protocol
from engine.cluster import apply_change, mark_remote, step_down, take_over
from engine.cluster.forward import make_forward, settle_forwards
from engine.cluster.link import ClusterLinkSession
from engine.cluster.membership import place_declared
from engine.cluster.relay import Relays
from engine.storage.postgres.cluster import Change, ClusterStore, Heartbeat
from engine.store import StoreError

from .link import Links

__all__ = ["ClusterNode", "attach_cluster", "DEFINITIONS_POLL"]

log = logging.getLogger("sansmq.cluster")

#: seconds between two reads of the definitions change log (bounds how late a declare made on
#: another node is in force here; not the message path)
DEFINITIONS_POLL = 0.1


def attach_cluster(broker: Any, store: ClusterStore, tls: ssl.SSLContext | None = None) -> Links:
    """Right after the broker restored the store: queues other nodes lead become remote (what is
    published to them goes to their leader over the links returned, TLS with ``tls``), new
    message ids start in this node's own id space, the link listener's sessions are known."""
    register_protocol(ClusterLinkSession.PROTOCOL, ClusterLinkSession)
    model = broker.model
    links = Links(store, tls=tls)
    store.dispatch = links.forwarders.dispatch
    broker.sync_gate = store.confirmed_through  # a token completes once its forwards are confirmed too
    model.publisher.forward = make_forward(model, store, broker.sync_token)
    model.relays = links.relays.relays = Relays(model, links.relays.open, model.streams.log, links.gets.fetch)
    place_declared(model, store.placed)
    store.locator = model.policies.leader_locator  # a policy's queue-leader-locator places new queues too
    model._next_msg_id = store.first_message_id  # not a recovered id of another node's space
    mark_remote(broker, store.remote_leaders)
    return links


class ClusterNode:
    """Membership upkeep for ``store``'s node, applying what it finds through ``driver``."""

    def __init__(self, store: ClusterStore, driver: Any, links: Links, poll: float = DEFINITIONS_POLL) -> None:
        self.store = store
        self.links = links
        links.relays.post = self._post
        links.gets.post = self._post
        links.forwarders.report = self._forwarded
        self.driver = driver
        self.poll = poll
        self.beat = max(store.lease / 3, 0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sansmq-cluster", daemon=True)
        store.on_fenced = self._fenced

    @property
    def rabbit_name(self) -> str:
        """This node's name as the management API shows it (RabbitMQ's ``name@host`` form)."""
        return f"sansmq@{self.store.node}"

    @property
    def cluster_name(self) -> str:
        """The cluster's name: its database (every node on it is the cluster)."""
        return f"sansmq@{self.store.display_dsn.rsplit('/', 1)[-1]}"

    def nodes(self) -> list[dict[str, Any]]:
        """Every node of the cluster in ``/api/nodes``'s shape (read from the database)."""
        from engine.storage.postgres.cluster import cluster_view

        view = cluster_view(self.store.dsn, self.store.schema)
        leaders: dict[str, int] = {}
        for lease in view["leases"]:
            leaders[lease["leader"]] = leaders.get(lease["leader"], 0) + 1
        return [{"name": f"sansmq@{n['name']}", "type": "disc", "running": n["running"],
                 "cluster_address": n["address"], "heartbeat_age": n["heartbeat_age"],
                 "queue_leaders": leaders.get(n["name"], 0), "being_drained": n["drained"]} for n in view["nodes"]]

    def start(self, bound: Sequence[Any] = ()) -> None:
        """Start the upkeep once the server listens; the node advertises the link listener it
        actually bound (``bound``: the driver's listeners, ports resolved)."""
        link = next((lst for lst in bound if lst.protocol == ClusterLinkSession.PROTOCOL), None)
        if link is not None:
            self.store.address = f"{link.host}:{link.port}"
        # clients learn which node they reached (the Spark source: to read streams on their leaders)
        self.driver.broker.advertised["node"] = self.rabbit_name
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        self.links.close()

    def _run(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set():
            try:
                self.store.commit_definitions()
                changes = self.store.definitions_since()
                if changes:
                    self._post(lambda b, cs=changes: self._apply_changes(b, cs))
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.beat
                    hb = self.store.heartbeat()
                    if hb.lost or hb.acquired or hb.leaders:
                        self._post(lambda b, h=hb: self._apply_heartbeat(b, h))
                    if self.store.forwards_waiting():  # kept dead letters: a sync sends them again
                        self._post(lambda b: b.model.store_write())
            except StoreError as exc:
                log.warning("cluster node %s: %s (retrying)", self.store.node, exc)
            except Exception:  # noqa: BLE001 - a bug must not stop the heartbeats (the leases would go)
                if self._stop.is_set():
                    return
                log.exception("cluster node %s: membership upkeep failed (retrying)", self.store.node)
            self._stop.wait(self.poll)

    def _post(self, fn: Any) -> None:
        """Run ``fn(broker)`` on the loop thread (nothing once the server stopped)."""
        broker = self.driver.broker
        try:
            self.driver.call_soon(lambda: broker.run_command(fn, time.time()))
        except RuntimeError:  # the server stopped: call_soon refused
            self._stop.set()

    def _forwarded(self, items: list[Any], error: StoreError | None) -> None:
        """A leader confirmed ``items`` or they failed (a sender thread): settled on the loop."""
        broker, store = self.driver.broker, self.store
        try:
            self.driver.call_soon(lambda: settle_forwards(broker, store, items, error, time.time()))
        except RuntimeError:  # the server stopped: nobody waits for the answer
            pass

    def _fenced(self, names: list[tuple[str, str]]) -> None:
        """The store's sync was fenced off ``names`` (a worker thread): step down at once."""
        self._post(lambda b: step_down(b, names))

    @staticmethod
    def _apply_changes(broker: Any, changes: list[Change]) -> None:
        for change in changes:
            apply_change(broker, change.op, change.params)
        lag = time.time() - changes[-1].at
        log.debug("cluster: applied %d definition changes (last %.3fs after its commit)", len(changes), lag)

    @staticmethod
    def _apply_heartbeat(broker: Any, hb: Heartbeat) -> None:
        for key in hb.lost:
            step_down(broker, [key], hb.leaders.get(key, "(another node)"))
        for key, messages in hb.acquired.items():
            take_over(broker, key, messages, hb.epochs[key])
        mark_remote(broker, hb.leaders)
