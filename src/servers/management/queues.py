"""Queues: list, declare, delete, purge, and get messages."""

from __future__ import annotations

from typing import Any

from engine.model import Consumer
from engine.model.security import check_target_exchange
from engine.stats import queue_infos, queue_refs

from .base import ApiBase
from .listing import Page, Streamed, chunked, page_of
from .request import Request, bad_request, not_found, put_status
from .shapes import payload_text, props_dict, queue_rates, vhost_names


class GetHolder(Consumer):
    """The holder of messages fetched by POST .../get: never registered on the queue."""

    __slots__ = ()
    blocked = False


class NoOwner:
    blocked = False


class QueueRoutes(ApiBase):
    """Queues: list, declare, delete, purge, and get messages."""

    def _queue_info(self, q: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in q.items()
               if k not in ("message_bytes_ready", "effective_arguments", "counters", "rates", "leader_node")}
        # RabbitMQ's "node" is where the queue's leader runs: in a cluster, maybe another node
        leader = q.get("leader_node")
        node = self.node if leader is None else f"{self.node.partition('@')[0]}@{leader}"
        out.update({"node": node, "state": "running",
                    "exclusive_consumer_tag": None, "message_bytes": q["message_bytes_ready"]})
        if q["type"] == "quorum":  # RabbitMQ lists a quorum queue's members; on one node, this one
            out.update({"leader": self.node, "members": [self.node], "online": [self.node]})
        elif q["type"] == "stream":  # as RabbitMQ lists a stream's leader
            out["leader"] = node
        out.update(queue_rates(q["counters"], q["rates"]))
        return out

    def _infos(self, refs: list[Any]) -> list[dict[str, Any]]:
        return [self._queue_info(q) for q in self.call(lambda b: queue_infos(b, refs))]

    def queues(self, req: Request, vhost: str | None = None) -> Any:
        """All the queues the user sees (of ``vhost``), streamed; with ``page``, RabbitMQ's paginated
        answer sorted by vhost and name. Built in chunks, never in one turn of the broker's loop."""
        if vhost is not None:
            self._check_vhost(req, vhost)
        page = Page.of(req)
        seen = [v for v in vhost_names(self.snap(), req.principal) if vhost is None or v == vhost]
        refs = self.call(lambda b: queue_refs(b, seen))
        if page is None:
            return Streamed(map(lambda part: [self._queue_info(q) for q in part],
                                chunked(self.call, queue_infos, refs)))
        refs.sort(key=lambda q: (q.vhost.name, q.name))  # immutable names: sorted here, off the loop
        return page_of(page, refs, lambda q: q.name, len(refs), self._infos)

    def _find_queue(self, req: Request, vhost: str, name: str) -> dict[str, Any]:
        self._check_vhost(req, vhost)

        def find(b: Any) -> list[dict[str, Any]]:
            q = b.model.vhosts[vhost].queues.get(name) if vhost in b.model.vhosts else None
            return queue_infos(b, [q]) if q is not None else []

        found = self.call(find)
        if not found:
            raise not_found()
        return found[0]  # type: ignore[no-any-return]

    def queue(self, req: Request, vhost: str, name: str) -> Any:
        return self._queue_info(self._find_queue(req, vhost, name))

    def put_queue(self, req: Request, vhost: str, name: str) -> Any:
        self._check_access(req, vhost, "configure", "queue", name)
        body = req.json()
        durable = bool(body.get("durable", True))
        auto_delete = bool(body.get("auto_delete", False))
        args = body.get("arguments") or None
        if args is not None and not isinstance(args, dict):
            raise bad_request("arguments must be an object")

        def declare(b: Any) -> bool:
            v = b.model.vhosts[vhost]
            existed = name in v.queues
            if not existed:
                check_target_exchange(self.user_access(b, req, vhost), "queue", name, args)
            b.model.declare_queue(v, name, durable, auto_delete, None, args)
            return existed

        return put_status(self._command_400(declare))

    def delete_queue(self, req: Request, vhost: str, name: str) -> Any:
        self._find_queue(req, vhost, name)
        self._check_access(req, vhost, "configure", "queue", name)
        if_empty = req.query.get("if-empty") == ["true"]
        if_unused = req.query.get("if-unused") == ["true"]

        def delete(b: Any) -> str | None:
            q = b.model.vhosts[vhost].queues.get(name)
            if q is None:
                return "gone"
            if if_empty and (q.count or q.unacked_count()):
                return "not empty"
            if if_unused and q.consumers:
                return "in use"
            b.model.delete_queue(q)
            return None

        why = self.command(delete)
        if why == "gone":
            raise not_found()
        if why:
            raise bad_request(f"PRECONDITION_FAILED - queue '{name}' in vhost '{vhost}' {why}")
        return None

    def purge(self, req: Request, vhost: str, name: str) -> Any:
        self._find_queue(req, vhost, name)
        self._check_access(req, vhost, "read", "queue", name)
        self.command(lambda b: b.model.purge(b.model.vhosts[vhost].queues[name])
                     if name in b.model.vhosts[vhost].queues else None)
        return None

    def get_messages(self, req: Request, vhost: str, name: str) -> Any:
        self._find_queue(req, vhost, name)
        self._check_access(req, vhost, "read", "queue", name)
        body = req.json()
        ackmode = body.get("ackmode", "ack_requeue_true" if body.get("requeue", True) else "ack_requeue_false")
        if ackmode not in ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false"):
            raise bad_request(f"unknown ackmode {ackmode!r}")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request(f"unknown encoding {encoding!r}")
        try:
            count = int(body.get("count", 1))
            truncate = int(body["truncate"]) if body.get("truncate") is not None else None
        except (TypeError, ValueError):
            raise bad_request("count and truncate must be integers") from None

        def fetch(b: Any) -> list[dict[str, Any]]:
            q = b.model.vhosts[vhost].queues.get(name)
            if q is None:
                return []
            holder = GetHolder(q, NoOwner(), 0, False)  # type: ignore[arg-type]
            out, tags = [], []
            for _ in range(max(0, count)):
                got = b.model.get(q, holder)
                if got is None:
                    break
                tag, entry = got
                tags.append(tag)
                msg = entry.msg
                payload, enc = payload_text(msg.body, encoding, truncate)
                out.append({"payload_bytes": len(msg.body), "redelivered": entry.count > 0,
                            "exchange": msg.exchange, "routing_key": msg.routing_key,
                            "message_count": q.count, "properties": props_dict(msg),
                            "payload": payload, "payload_encoding": enc})
            requeue = ackmode.endswith("true")
            for tag in tags:  # requeued together at the end, as closing RabbitMQ's private channel
                if requeue:
                    b.model.nack(holder, tag, False, True)
                elif ackmode.startswith("ack"):
                    b.model.ack(holder, tag)
                else:
                    b.model.nack(holder, tag, False, False)
            return out

        return self.command(fetch)
