"""Large listings over real HTTP: RabbitMQ's pagination of /api/queues, the streamed full list and
/metrics/per-object with more queues than one chunk, and that neither path builds (or keeps) the
figures of all queues at once. The loop-stall and memory figures with 100,000 queues are measured
by benchmarks/bench_http_listings.py (timing bounds do not belong in tests on a shared machine)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from e2ekit import ops_server
from prometheus_client.parser import text_string_to_metric_families

from engine.stats import snapshot
from servers.management import OpsListeners, base, prometheus, queues
from servers.management.listing import CHUNK

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
#: more than two chunks, in two vhosts
N = 2 * CHUNK + 300
ODD = 'we"ird\\name\nline'


class Api:
    def __init__(self, ops: OpsListeners) -> None:
        self.ops = ops
        self.http = ops.bound["http"][1]
        self.prom = ops.bound["prometheus"][1]

    def get(self, path: str) -> tuple[int, Any]:
        rq = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", headers={"Authorization": AUTH})
        try:
            with urllib.request.urlopen(rq, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def metrics(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.prom}{path}", timeout=30) as resp:
            return resp.read().decode()


def _declare(b: Any) -> None:
    model = b.model
    b.add_vhost("other")
    for i in range(N):
        model.declare_queue(model.vhosts["other" if i % 3 == 0 else "/"], f"q-{N - i:05d}", False, False, None, None)
    model.declare_queue(model.vhosts["/"], ODD, False, False, None, None)


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with ops_server() as (r, ops):
        r.admin(_declare)
        yield Api(ops)


def test_the_full_list_is_streamed_whole(api: Api) -> None:
    status, items = api.get("/api/queues")
    assert status == 200 and len(items) == N + 1
    assert {q["name"] for q in items} == {f"q-{i:05d}" for i in range(1, N + 1)} | {ODD}
    assert all(q["messages"] == 0 and q["node"] == "sansmq@localhost" for q in items)
    status, other = api.get("/api/queues/other")
    assert status == 200 and len(other) == len([i for i in range(N) if i % 3 == 0])
    assert {q["vhost"] for q in other} == {"other"}


def test_pages_as_rabbitmq(api: Api) -> None:
    everything = sorted((q["vhost"], q["name"]) for q in api.get("/api/queues")[1])
    pages = []
    count = -(-(N + 1) // 500)
    for page in range(1, count + 1):
        status, body = api.get(f"/api/queues?page={page}&page_size=500")
        assert status == 200, body
        assert {k: v for k, v in body.items() if k != "items"} == {
            "filtered_count": N + 1, "item_count": len(body["items"]), "page": page, "page_count": count,
            "page_size": 500, "total_count": N + 1}
        pages += [(q["vhost"], q["name"]) for q in body["items"]]
    assert pages == everything  # sorted by vhost, then name, nothing missing or repeated
    status, body = api.get("/api/queues?page=1")
    assert status == 200 and body["page_size"] == 100 and len(body["items"]) == 100


def test_name_filters(api: Api) -> None:
    status, body = api.get("/api/queues?page=1&page_size=500&name=Q-0001")  # a substring, any case
    assert status == 200 and sorted(q["name"] for q in body["items"]) == [f"q-{i:05d}" for i in range(10, 20)]
    assert body["filtered_count"] == 10 and body["total_count"] == N + 1 and body["page_count"] == 1
    status, body = api.get("/api/queues/other?page=1&name=%5EQ-0000%5B1-3%5D%24&use_regex=true")
    assert status == 200 and {q["name"] for q in body["items"]} <= {"q-00001", "q-00002", "q-00003"}
    assert body["items"] and {q["vhost"] for q in body["items"]} == {"other"}
    status, body = api.get("/api/queues?page=1&name=nothing-matches")
    assert status == 200 and body["items"] == [] and body["filtered_count"] == 0


@pytest.mark.parametrize("query", ["page=0", "page=x", "page=1&page_size=501", "page=1&page_size=0", "page=99",
                                   "page=1&name=(&use_regex=true", "page=1&name=(a%2B)%2B%24&use_regex=true",
                                   "page=1&name=(ab%7Ca)*x&use_regex=true", "page=1&name=(q)%5C1&use_regex=true"])
def test_bad_pages_are_400(api: Api, query: str) -> None:
    """Invalid numbers, a page past the end, a bad regex, and regexes whose matching time can explode
    (Python's matcher holds the GIL: one would freeze the broker's loop too)."""
    status, body = api.get(f"/api/queues?{query}")
    assert status == 400 and body["error"] == "bad_request"


def test_listings_build_the_figures_a_chunk_or_a_page_at_a_time(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []

    def counting(fn: Any) -> Any:
        def wrapper(broker: Any, refs: list[Any]) -> Any:
            built.append(len(refs))
            return fn(broker, refs)
        return wrapper

    monkeypatch.setattr(queues, "queue_infos", counting(queues.queue_infos))
    monkeypatch.setattr(prometheus, "queue_gauges", counting(prometheus.queue_gauges))
    assert api.get("/api/queues?page=3&page_size=50")[0] == 200
    assert built == [50]
    built.clear()
    assert len(api.get("/api/queues")[1]) == N + 1
    assert max(built) == CHUNK and sum(built) == N + 1
    built.clear()
    api.metrics("/metrics/per-object")
    assert max(built) == CHUNK and sum(built) == N + 1
    assert all("queues" not in key for key in api.ops.api._snaps)  # no snapshot of every queue is kept


def test_per_object_metrics(api: Api) -> None:
    families = {f.name: f for f in text_string_to_metric_families(api.metrics("/metrics/per-object"))}
    ready = families["rabbitmq_queue_messages_ready"].samples
    assert len(ready) == N + 1 and {s.labels["vhost"] for s in ready} == {"/", "other"}
    assert any(s.labels["queue"] == ODD for s in ready)  # escaped and read back intact
    for name in ("rabbitmq_queue_messages", "rabbitmq_queue_consumers", "rabbitmq_queue_messages_unacked",
                 "rabbitmq_queue_messages_bytes"):
        assert len(families[name].samples) == N + 1 and all(s.value == 0 for s in families[name].samples)
    assert families["rabbitmq_queues"].samples[0].value == N + 1
    aggregated = {f.name: f for f in text_string_to_metric_families(api.metrics("/metrics"))}
    assert [s.labels for s in aggregated["rabbitmq_queue_messages_ready"].samples] == [{}]


def test_one_queue_is_looked_up_not_listed(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queues, "queue_refs", None)  # a lookup never lists
    status, q = api.get("/api/queues/other/q-00002")  # i = N - 2, a multiple of 3
    assert status == 200 and q["name"] == "q-00002" and q["vhost"] == "other"
    assert api.get("/api/queues/other/q-00001")[0] == 404  # it is in /
    assert api.get("/api/queues/%2F/q-00001")[0] == 200


def test_snapshots_with_object_lists_are_not_kept(api: Api) -> None:
    for path in ("/api/bindings", "/api/exchanges", "/api/consumers", "/api/overview"):
        assert api.get(path)[0] == 200
    assert list(api.ops.api._snaps) == [()]  # only the small one (counts, users) is shared for 0.2 s


def test_the_bindings_list_is_built_from_queue_references(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[tuple[str, ...]] = []

    def recording(broker: Any, sections: tuple[str, ...] = ()) -> Any:
        taken.append(sections)
        return snapshot(broker, sections)

    monkeypatch.setattr(base, "snapshot", recording)
    status, listed = api.get("/api/bindings/other")
    assert status == 200 and taken in ([], [()])  # no snapshot of every binding
    implicit = [b for b in listed if b["source"] == ""]
    assert len(implicit) == len([i for i in range(N) if i % 3 == 0]) and {b["vhost"] for b in listed} == {"other"}
    assert all(b["routing_key"] == b["destination"] and b["properties_key"] == b["destination"] for b in implicit)
    status, everything = api.get("/api/bindings")
    assert status == 200 and [b["vhost"] for b in everything] == sorted((b["vhost"] for b in everything),
                                                                         key=lambda v: v != "/")
    assert len(everything) == N + 1 and any(b["destination"] == ODD for b in everything)
