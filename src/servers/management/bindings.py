"""Bindings between exchanges and queues or exchanges."""

from __future__ import annotations

import itertools
import urllib.parse
from collections.abc import Iterator
from typing import Any

from engine.model.security import check_topic_access
from engine.stats import default_binding, explicit_bindings, queue_refs

from .exchanges import ExchangeRoutes
from .listing import CHUNK, Streamed
from .queues import QueueRoutes
from .request import Request, not_found, unauthorised
from .shapes import props_key, vhost_names


class BindingRoutes(QueueRoutes, ExchangeRoutes):
    """Bindings between exchanges and queues or exchanges."""

    @staticmethod
    def _binding_info(b: dict[str, Any]) -> dict[str, Any]:
        return dict(b, properties_key=props_key(b["routing_key"], b["arguments"]))

    def bindings(self, req: Request, vhost: str | None = None) -> Any:
        """Per vhost, the queues' implicit default-exchange bindings, then the declared ones; the
        implicit ones (one per queue: 100,000 with as many queues) are built here from queue
        references copied in one short turn of the broker's loop, and the answer is streamed."""
        if vhost is not None:
            self._check_vhost(req, vhost)
        seen = [v for v in vhost_names(self.snap(), req.principal) if vhost is None or v == vhost]
        refs, declared = self.call(lambda b: (queue_refs(b, seen), {
            v: explicit_bindings(b.model.vhosts[v]) for v in seen if v in b.model.vhosts}))

        def parts() -> Iterator[list[dict[str, Any]]]:
            by_vhost = itertools.groupby(refs, key=lambda q: q.vhost.name)
            implicit = {name: list(queues) for name, queues in by_vhost}
            for name in declared:
                queues = implicit.get(name, [])
                for start in range(0, len(queues), CHUNK):
                    yield [self._binding_info(default_binding(q)) for q in queues[start:start + CHUNK]]
                yield [self._binding_info(b) for b in declared[name]]

        return Streamed(parts())

    def source_bindings(self, req: Request, vhost: str, name: str) -> Any:
        self._find_exchange(req, vhost, name)
        return [self._binding_info(b) for b in self.snap("bindings")["bindings"]
                if b["vhost"] == vhost and b["source"] == name]

    def destination_bindings(self, req: Request, vhost: str, name: str) -> Any:
        self._find_exchange(req, vhost, name)
        return [self._binding_info(b) for b in self.snap("bindings")["bindings"]
                if b["vhost"] == vhost and b["destination"] == name and b["destination_type"] == "exchange"]

    def _between(self, req: Request, vhost: str, source: str, kind: str, dest: str) -> list[dict[str, Any]]:
        if kind not in ("q", "e"):
            raise not_found()
        self._find_exchange(req, vhost, source)
        if kind == "q":
            self._find_queue(req, vhost, dest)
        else:
            self._find_exchange(req, vhost, dest)
        dtype = "queue" if kind == "q" else "exchange"
        return [self._binding_info(b) for b in self.snap("bindings")["bindings"] if b["vhost"] == vhost
                and b["source"] == source and b["destination"] == dest and b["destination_type"] == dtype]

    def bindings_between(self, req: Request, vhost: str, source: str, kind: str, dest: str) -> Any:
        return self._between(req, vhost, source, kind, dest)

    def bind(self, req: Request, vhost: str, source: str, kind: str, dest: str) -> Any:
        self._between(req, vhost, source, kind, dest)
        self._check_access(req, vhost, "write", "queue" if kind == "q" else "exchange", dest)
        self._check_access(req, vhost, "read", "exchange", source)
        body = req.json()
        key = str(body.get("routing_key", ""))
        args = body.get("arguments") or None
        if source == "":
            raise unauthorised("Access refused.")

        def bind(b: Any) -> None:
            v = b.model.vhosts[vhost]
            target = v.queues[dest] if kind == "q" else v.exchanges[dest]
            check_topic_access(self.user_access(b, req, vhost), v.exchanges[source], key, "read")
            b.model.bind(v, target, v.exchanges[source], key, args)

        self._command_400(bind)
        location = "/api/bindings/{}/e/{}/{}/{}/{}".format(
            *(urllib.parse.quote(s, safe="") for s in (vhost, source, kind, dest)), props_key(key, args or {}))
        return 201, None, [("Location", location)]

    def binding(self, req: Request, vhost: str, source: str, kind: str, dest: str, props: str) -> Any:
        for b in self._between(req, vhost, source, kind, dest):
            if b["properties_key"] == urllib.parse.quote(props, safe="~") or b["properties_key"] == props:
                return b
        raise not_found()

    def unbind(self, req: Request, vhost: str, source: str, kind: str, dest: str, props: str) -> Any:
        found = self.binding(req, vhost, source, kind, dest, props)
        self._check_access(req, vhost, "write", "queue" if kind == "q" else "exchange", dest)
        self._check_access(req, vhost, "read", "exchange", source)

        def unbind(b: Any) -> None:
            v = b.model.vhosts[vhost]
            target = v.queues.get(dest) if kind == "q" else v.exchanges.get(dest)
            if target is not None and source in v.exchanges:
                check_topic_access(self.user_access(b, req, vhost), v.exchanges[source], found["routing_key"], "read")
                b.model.unbind(v, target, v.exchanges[source], found["routing_key"], found["arguments"] or None)

        self._command_400(unbind)
        return None


    def queue_bindings(self, req: Request, vhost: str, name: str) -> Any:
        self._find_queue(req, vhost, name)
        return [self._binding_info(b) for b in self.snap("bindings")["bindings"]
            if b["vhost"] == vhost and b["destination"] == name and b["destination_type"] == "queue"]
