"""The management HTTP API, Prometheus metrics and rabbitmqadmin against sansmq on each server.

Opt-in against RabbitMQ 3.10 with rabbitmq_management and rabbitmq_prometheus:
SANSMQ_MGMT_RABBITMQ=HTTP_PORT,AMQP_PORT,PROMETHEUS_PORT (a private node, guest/guest).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servers import SERVER_KINDS, running
from servers.management import OpsListeners

TARGETS = list(SERVER_KINDS) + (["rabbitmq"] if os.environ.get("SANSMQ_MGMT_RABBITMQ") else [])
RABBITMQADMIN = shutil.which("rabbitmqadmin")


@dataclass
class Target:
    http: int
    amqp: int
    prometheus: int
    #: how soon counts follow traffic: about a second here (the issue's bound, with a margin);
    #: RabbitMQ collects statistics every 5 s
    stats_wait: float = 2.0

    def ready(self, path: str) -> int | None:
        return (self.req("GET", path)[1] or {}).get("messages_ready")

    def req(self, method: str, path: str, body: Any = None, user: str | None = "guest:guest",
            raw: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if user is not None:
            hdrs["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
        rq = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(rq, timeout=10) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def metrics(self, path: str = "/metrics") -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.prometheus}{path}", timeout=10) as resp:
            return resp.read().decode()

    def amqp_conn(self, name: str = "mgmt-test") -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.amqp,
                                                                 client_properties={"connection_name": name}))


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "rabbitmq":
        http, amqp, prom = (int(p) for p in os.environ["SANSMQ_MGMT_RABBITMQ"].split(","))
        yield Target(http, amqp, prom, stats_wait=15.0)
        return
    with running(request.param, [("amqp", "127.0.0.1", 0)]) as r:
        ops = OpsListeners(r.server, ("127.0.0.1", 0), ("127.0.0.1", 0))
        ops.start()
        try:
            yield Target(ops.bound["http"][1], r.address("amqp")[1], ops.bound["prometheus"][1])
        finally:
            ops.stop()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name`` in a Prometheus text exposition."""
    return [(dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def wait_for(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_auth_and_errors(target: Target) -> None:
    assert target.req("GET", "/api/overview", user=None)[0] == 401
    assert target.req("GET", "/api/overview", user="guest:wrong") == (
        401, {"error": "not_authorized", "reason": "Login failed"})
    assert target.req("GET", "/api/overview", user="nobody:x")[0] == 401
    status, body = target.req("GET", "/api/whoami")
    assert status == 200 and body["name"] == "guest" and "administrator" in body["tags"]
    status, body = target.req("GET", "/api/queues/%2F/no-such-queue")
    assert status == 404 and body["error"] == "Object Not Found"
    assert target.req("GET", "/api/vhosts/no-such-vhost")[0] == 404
    assert target.req("GET", "/api/no-such-thing")[0] == 404
    assert target.req("PUT", "/api/queues/%2F/bad-json", raw=b"{not json") == (
        400, {"error": "bad_request", "reason": "not_json"})
    assert target.req("PUT", "/api/exchanges/%2F/bad-type", {"type": "nonsense"})[0] == 400
    assert target.req("DELETE", "/api/overview")[0] == 405
    publish = "/api/exchanges/%2F/amq.default/publish"
    message = {"routing_key": "no-such-queue", "payload": "p", "payload_encoding": "string"}
    assert target.req("POST", publish, {**message, "properties": {"priority": "high"}}) == (
        400, {"error": "bad_request", "reason": ["not_int", "priority"]})
    assert target.req("POST", publish, {**message, "properties": {"bogus": 1}}) == (200, {"routed": False})
    refused = (401, {"error": "not_authorised", "reason": "Access refused."})
    assert target.req("PUT", "/api/exchanges/%2F/amq.mine", {"type": "direct"}) == refused
    assert target.req("DELETE", "/api/exchanges/%2F/amq.direct") == refused
    assert target.req("GET", "/api/connections/no-such-connection")[0] == 404
    assert target.req("DELETE", "/api/queues/%2F/no-such-queue")[0] == 404


def test_bounded_body(target: Target) -> None:
    big = b'{"payload": "' + b"x" * 11_000_000 + b'"}'  # over RabbitMQ's default 10 MB
    status, body = target.req("POST", "/api/exchanges/%2F/amq.default/publish", raw=big)
    assert (status, body) == (400, {"error": "bad_request", "reason": "Exceeded HTTP request body size limit"})
    huge = b"x" * 64_000_000
    try:
        status = target.req("POST", "/api/exchanges/%2F/amq.default/publish", raw=huge)[0]
    except (ConnectionError, urllib.error.URLError):
        return  # the server may drop the connection without reading the rest: also refused
    assert status in (400, 413)


def test_overview_and_vhosts(target: Target) -> None:
    status, body = target.req("GET", "/api/overview")
    assert status == 200
    for key in ("object_totals", "queue_totals", "message_stats", "listeners", "node", "rabbitmq_version"):
        assert key in body
    assert any(lst["protocol"] == "amqp" for lst in body["listeners"])
    status, vhosts = target.req("GET", "/api/vhosts")
    assert status == 200 and "/" in [v["name"] for v in vhosts]
    assert target.req("PUT", "/api/vhosts/mgmt-v", {})[0] == 201
    assert target.req("GET", "/api/vhosts/mgmt-v")[0] == 200
    assert target.req("DELETE", "/api/vhosts/mgmt-v")[0] == 204
    assert target.req("GET", "/api/vhosts/mgmt-v")[0] == 404


def test_queue_lifecycle_and_counts(target: Target) -> None:
    q = "/api/queues/%2F/mgmt-q"
    target.req("DELETE", q)
    assert target.req("PUT", q, {"durable": False, "auto_delete": False, "arguments": {"x-max-length": 100}})[0] == 201
    assert target.req("PUT", q, {"durable": False, "auto_delete": False, "arguments": {"x-max-length": 100}})[0] == 204
    conn = target.amqp_conn()
    ch = conn.channel()
    for i in range(3):
        ch.basic_publish("", "mgmt-q", f"m{i}".encode())
    assert wait_for(lambda: target.ready(q) == 3, target.stats_wait)
    info = wait_for(lambda: (lambda i: i if "consumers" in i and "messages" in i else None)(target.req("GET", q)[1]),
                    target.stats_wait)
    assert info["arguments"] == {"x-max-length": 100} and info["consumers"] == 0 and info["messages"] == 3
    status, got = target.req("POST", q + "/get", {"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert status == 200 and [m["payload"] for m in got] == ["m0", "m1"]
    assert got[0]["payload_encoding"] == "string" and got[0]["routing_key"] == "mgmt-q"
    status, got = target.req("POST", q + "/get", {"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"})
    assert got[0]["redelivered"] is True and base64.b64decode(got[0]["payload"]) == b"m0"
    assert got[0]["payload_encoding"] == "base64"
    status, body = target.req("POST", "/api/exchanges/%2F/amq.default/publish",
                              {"properties": {"content_type": "text/plain"}, "routing_key": "mgmt-q",
                               "payload": "via-http", "payload_encoding": "string"})
    assert status == 200 and body == {"routed": True}
    assert wait_for(lambda: target.ready(q) == 3, target.stats_wait)
    method, props, msg = ch.basic_get("mgmt-q", auto_ack=True)
    assert msg == b"m1"
    assert target.req("DELETE", q + "/contents")[0] == 204
    assert wait_for(lambda: target.ready(q) == 0, target.stats_wait)
    assert target.req("DELETE", q)[0] == 204
    assert target.req("GET", q)[0] == 404
    conn.close()


def test_stream_is_listed_as_a_stream_with_what_it_holds(target: Target) -> None:
    q = "/api/queues/%2F/mgmt-stream"
    target.req("DELETE", q)
    assert target.req("PUT", q, {"durable": True, "arguments": {"x-queue-type": "stream"}})[0] == 201
    conn = target.amqp_conn()
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "mgmt-stream", f"m{i}".encode())
    info = wait_for(lambda: (lambda i: i if i.get("messages") == 3 else None)(target.req("GET", q)[1]),
                    target.stats_wait)
    assert info and info["type"] == "stream" and info["messages_ready"] == 3, info
    listed = {x["name"]: x["type"] for x in target.req("GET", "/api/queues/%2F")[1]}
    assert listed["mgmt-stream"] == "stream"
    conn.close()
    assert target.req("DELETE", q)[0] == 204


def test_queue_message_stats_and_rates(target: Target) -> None:
    q = "/api/queues/%2F/mgmt-rates"
    target.req("DELETE", q)
    assert target.req("PUT", q, {"durable": False})[0] == 201
    status, fresh = target.req("GET", q)
    assert status == 200 and "message_stats" not in fresh  # no traffic yet, as RabbitMQ
    conn = target.amqp_conn()
    ch = conn.channel()
    for i in range(50):
        ch.basic_publish("", "mgmt-rates", f"m{i}".encode())
    tags = [ch.basic_get("mgmt-rates")[0].delivery_tag for _ in range(6)]
    ch.basic_ack(tags[4], multiple=True)  # five acks
    ch.basic_nack(tags[5], requeue=True)
    method, _, _ = ch.basic_get("mgmt-rates")
    assert method.redelivered
    ch.basic_ack(method.delivery_tag)
    want = {"publish": 50, "deliver_get": 7, "redeliver": 1, "ack": 6}

    def stats() -> dict[str, Any] | None:
        ms = target.req("GET", q)[1].get("message_stats") or {}
        return ms if all(ms.get(k) == v for k, v in want.items()) else None

    ms = wait_for(stats, target.stats_wait)
    assert ms, target.req("GET", q)[1]
    for key in want:
        assert isinstance(ms[f"{key}_details"]["rate"], (int, float))
    info = target.req("GET", q)[1]
    for depth in ("messages", "messages_ready", "messages_unacknowledged"):
        assert isinstance(info[f"{depth}_details"]["rate"], (int, float))

    def publishing_shows_a_rate() -> bool:  # steady traffic while polling: both sample over ~5 s
        ch.basic_publish("", "mgmt-rates", b"more")
        return target.req("GET", q)[1]["message_stats"]["publish_details"]["rate"] > 0

    assert wait_for(publishing_shows_a_rate, target.stats_wait)
    listed = [x for x in target.req("GET", "/api/queues/%2F")[1] if x["name"] == "mgmt-rates"]
    assert listed[0]["message_stats"]["publish"] > 50
    conn.close()
    assert target.req("DELETE", q)[0] == 204


def test_exchanges_and_bindings(target: Target) -> None:
    x, q = "/api/exchanges/%2F/mgmt-x", "/api/queues/%2F/mgmt-bq"
    assert target.req("PUT", x, {"type": "topic", "durable": False})[0] in (201, 204)
    assert target.req("PUT", q, {"durable": False})[0] in (201, 204)
    status, _ = target.req("POST", "/api/bindings/%2F/e/mgmt-x/q/mgmt-bq", {"routing_key": "a.*", "arguments": {}})
    assert status == 201
    status, found = target.req("GET", "/api/bindings/%2F/e/mgmt-x/q/mgmt-bq")
    assert status == 200 and [b["routing_key"] for b in found] == ["a.*"]
    key = urllib.parse.quote(found[0]["properties_key"], safe="")
    assert target.req("POST", "/api/exchanges/%2F/mgmt-x/publish",
                      {"properties": {}, "routing_key": "a.b", "payload": "t", "payload_encoding": "string"})[1] == {
        "routed": True}
    assert target.req("DELETE", f"/api/bindings/%2F/e/mgmt-x/q/mgmt-bq/{key}")[0] == 204
    assert target.req("GET", "/api/bindings/%2F/e/mgmt-x/q/mgmt-bq")[1] == []
    assert target.req("POST", "/api/exchanges/%2F/mgmt-x/publish",
                      {"properties": {}, "routing_key": "a.b", "payload": "t", "payload_encoding": "string"})[1] == {
        "routed": False}
    assert target.req("DELETE", x)[0] == 204
    assert target.req("DELETE", q)[0] == 204


def test_close_connection(target: Target) -> None:
    label = f"mgmt-close-{time.monotonic_ns()}"
    conn = target.amqp_conn(label)
    conn.channel()

    def ours() -> Any:
        status, conns = target.req("GET", "/api/connections")
        return [c for c in conns if c.get("client_properties", {}).get("connection_name") == label]

    found = wait_for(ours, target.stats_wait)
    assert found, "the connection is not listed"
    assert found[0]["user"] == "guest" and found[0]["vhost"] == "/"
    name = urllib.parse.quote(found[0]["name"], safe="")
    assert target.req("DELETE", f"/api/connections/{name}", headers={"X-Reason": "tests say bye"})[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(5)
        conn.channel()
    assert info.value.reply_code == 320
    assert info.value.reply_text == "CONNECTION_FORCED - tests say bye"
    assert target.req("DELETE", f"/api/connections/{name}")[0] == 404 or wait_for(lambda: not ours(), 5)


def test_health_and_aliveness(target: Target) -> None:
    assert target.req("GET", "/api/health/checks/alarms") == (200, {"status": "ok"})
    assert target.req("GET", "/api/aliveness-test/%2F") == (200, {"status": "ok"})


def test_definitions_round_trip(target: Target) -> None:
    assert target.req("PUT", "/api/queues/%2F/mgmt-def-q", {"durable": True})[0] in (201, 204)
    status, defs = target.req("GET", "/api/definitions")
    assert status == 200 and any(q["name"] == "mgmt-def-q" for q in defs["queues"])
    assert {"users", "vhosts", "permissions", "exchanges", "bindings"} <= set(defs)
    assert target.req("DELETE", "/api/queues/%2F/mgmt-def-q")[0] == 204
    status, _ = target.req("POST", "/api/definitions", {"queues": [q for q in defs["queues"]
                                                                   if q["name"] == "mgmt-def-q"]})
    assert status in (200, 201, 204)
    assert target.req("GET", "/api/queues/%2F/mgmt-def-q")[0] == 200
    assert target.req("POST", "/api/definitions", raw=b"[1, 2]")[0] == 400
    target.req("DELETE", "/api/queues/%2F/mgmt-def-q")


def test_prometheus(target: Target) -> None:
    conn = target.amqp_conn()
    ch = conn.channel()
    ch.queue_declare("mgmt-prom", auto_delete=False)
    ch.basic_publish("", "mgmt-prom", b"x")

    def ready() -> bool:
        found = samples(target.metrics("/metrics/per-object"), "rabbitmq_queue_messages_ready")
        return any(labels.get("queue") == "mgmt-prom" and labels.get("vhost") == "/" and value == 1
                   for labels, value in found)

    assert wait_for(ready, target.stats_wait + 10)
    text = target.metrics()
    for name in ("rabbitmq_queues", "rabbitmq_connections", "rabbitmq_channels", "rabbitmq_consumers",
                 "rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked",
                 "rabbitmq_global_messages_received_total", "rabbitmq_global_messages_delivered_total",
                 "rabbitmq_global_messages_acknowledged_total", "rabbitmq_global_messages_confirmed_total",
                 "rabbitmq_global_messages_redelivered_total", "rabbitmq_process_resident_memory_bytes",
                 "rabbitmq_alarms_memory_used_watermark", "rabbitmq_alarms_free_disk_space_watermark",
                 "rabbitmq_alarms_file_descriptor_limit"):
        assert samples(text, name), name
    assert all(labels == {} for labels, _ in samples(text, "rabbitmq_queue_messages_ready"))  # aggregated
    assert samples(text, "rabbitmq_connections")[0][1] >= 1
    ch.queue_delete("mgmt-prom")
    conn.close()


@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed (Debian's rabbitmq-server)")
def test_rabbitmqadmin(target: Target, tmp_path: Any) -> None:
    def admin(*args: str) -> str:
        out = subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(target.http), "-u", "guest",
                              "-p", "guest", *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    admin("declare", "queue", "name=adm-q", "durable=false")
    assert "adm-q" in admin("list", "queues", "name")
    admin("publish", "routing_key=adm-q", "payload=hello-admin")
    assert wait_for(lambda: "hello-admin" in admin("get", "queue=adm-q", "ackmode=ack_requeue_true"), 5)
    defs = tmp_path / "defs.json"
    admin("export", str(defs))
    assert any(q["name"] == "adm-q" for q in json.loads(defs.read_text())["queues"])
    admin("delete", "queue", "name=adm-q")
    assert "adm-q" not in admin("list", "queues", "name")
    admin("import", str(defs))
    assert wait_for(lambda: "adm-q" in admin("list", "queues", "name"), 5)
    admin("-f", "raw_json", "list", "exchanges")
    admin("delete", "queue", "name=adm-q")


def test_users_tags_and_permissions(target: Target) -> None:
    target.req("DELETE", "/api/users/mgmt-nopass")
    for name, tags in (("mgmt-plain", ""), ("mgmt-mon", "monitoring"), ("mgmt-mgr", "management")):
        target.req("DELETE", f"/api/users/{name}")
        assert target.req("PUT", f"/api/users/{name}", {"password": "pw", "tags": tags})[0] == 201
    assert target.req("PUT", "/api/users/mgmt-nopass", {"tags": "management"})[0] == 201  # no password login
    assert target.req("GET", "/api/overview", user="mgmt-nopass:")[0] == 401
    assert target.req("DELETE", "/api/users/mgmt-nopass")[0] == 204
    assert target.req("GET", "/api/overview", user="mgmt-plain:pw") == (
        401, {"error": "not_authorised", "reason": "Not management user"})
    assert target.req("GET", "/api/overview", user="mgmt-mon:wrong")[0] == 401
    status, me = target.req("GET", "/api/whoami", user="mgmt-mon:pw")
    assert status == 200 and me["tags"] == ["monitoring"]
    assert target.req("GET", "/api/queues", user="mgmt-mon:pw")[0] == 200
    # RabbitMQ refuses an authenticated user with 401 too, naming why
    refused = {"error": "not_authorised", "reason": "Not administrator user"}
    assert target.req("GET", "/api/users", user="mgmt-mgr:pw") == (401, refused)
    # a management user sees and changes only what its permissions allow
    no_vhost = (401, {"error": "not_authorised", "reason": "User not authorised to access virtual host"})
    assert target.req("GET", "/api/queues/%2F", user="mgmt-mgr:pw") == no_vhost  # no permission in "/"
    assert target.req("GET", "/api/queues", user="mgmt-mgr:pw") == (200, [])
    assert target.req("PUT", "/api/queues/%2F/mgmt-any", {}, user="mgmt-mon:pw") == no_vhost
    assert target.req("PUT", "/api/permissions/%2F/mgmt-mgr",
                      {"configure": "^mgr-", "write": ".*", "read": ".*"})[0] == 201
    status, perm = target.req("GET", "/api/permissions/%2F/mgmt-mgr")
    assert status == 200 and perm["configure"] == "^mgr-"
    assert any(p["user"] == "mgmt-mgr" for p in target.req("GET", "/api/users/mgmt-mgr/permissions")[1])

    def mgr_put(queue: str) -> int:
        return target.req("PUT", f"/api/queues/%2F/{queue}", {"durable": False}, user="mgmt-mgr:pw")[0]

    assert mgr_put("mgr-q") == 201
    assert target.req("PUT", "/api/queues/%2F/other-q", {"durable": False}, user="mgmt-mgr:pw") == (
        401, {"error": "not_authorised", "reason": "Access refused."})
    assert target.req("PUT", "/api/policies/%2F/mgmt-mgr-pol", {"pattern": "x", "definition": {"max-length": 1}},
                      user="mgmt-mgr:pw")[0] == 401
    assert target.req("DELETE", "/api/queues/%2F/mgr-q", user="mgmt-mgr:pw")[0] == 204
    assert target.req("DELETE", "/api/permissions/%2F/mgmt-mgr")[0] == 204
    assert target.req("GET", "/api/permissions/%2F/mgmt-mgr")[0] == 404
    for name in ("mgmt-plain", "mgmt-mon", "mgmt-mgr"):
        assert target.req("DELETE", f"/api/users/{name}")[0] == 204
    assert target.req("GET", "/api/users/mgmt-mon")[0] == 404
    assert wait_for(lambda: target.req("GET", "/api/whoami", user="mgmt-mon:pw")[0] == 401, 5)


def test_alternate_and_dead_letter_exchanges_need_write(target: Target) -> None:
    """The API declares as the user over a channel does: a new exchange's alternate exchange and a
    new queue's dead-letter exchange need write (RabbitMQ answers 401 "Access refused.")."""
    user = "mgmt-ae"
    target.req("DELETE", f"/api/users/{user}")
    assert target.req("PUT", f"/api/users/{user}", {"password": "pw", "tags": "management"})[0] == 201
    assert target.req("PUT", f"/api/permissions/%2F/{user}",
                      {"configure": "^mgmt-ae-", "write": "^mgmt-ae-", "read": ".*"})[0] == 201
    me = f"{user}:pw"
    for path in ("/api/queues/%2F/mgmt-ae-q", "/api/exchanges/%2F/mgmt-ae-ok"):
        target.req("DELETE", path)  # a failed earlier run's
    assert target.req("PUT", "/api/exchanges/%2F/mgmt-ae-ok", {"type": "fanout", "durable": False,
                      "arguments": {"alternate-exchange": "mgmt-ae-other"}}, user=me)[0] == 201
    refused = (401, {"error": "not_authorised", "reason": "Access refused."})
    assert target.req("PUT", "/api/exchanges/%2F/mgmt-ae-bad", {"type": "fanout", "durable": False,
                      "arguments": {"alternate-exchange": "amq.fanout"}}, user=me) == refused
    assert target.req("GET", "/api/exchanges/%2F/mgmt-ae-bad")[0] == 404
    assert target.req("PUT", "/api/queues/%2F/mgmt-ae-q", {"durable": False,
                      "arguments": {"x-dead-letter-exchange": "forbidden-dlx"}}, user=me) == refused
    assert target.req("GET", "/api/queues/%2F/mgmt-ae-q")[0] == 404
    assert target.req("PUT", "/api/queues/%2F/mgmt-ae-q", {"durable": False,
                      "arguments": {"x-dead-letter-exchange": "mgmt-ae-ok"}}, user=me)[0] == 201
    for path in ("/api/queues/%2F/mgmt-ae-q", "/api/exchanges/%2F/mgmt-ae-ok", f"/api/users/{user}"):
        assert target.req("DELETE", path)[0] == 204


def test_topic_permissions(target: Target) -> None:
    user, base = "mgmt-topic", "/api/topic-permissions/%2F/mgmt-topic"
    target.req("DELETE", f"/api/users/{user}")
    assert target.req("PUT", f"/api/users/{user}", {"password": "pw", "tags": "management"})[0] == 201
    assert target.req("PUT", f"/api/permissions/%2F/{user}", {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201
    assert target.req("PUT", base, {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^r\\."})[0] == 201
    assert target.req("PUT", base, {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^r\\."})[0] == 204
    want = {"user": user, "vhost": "/", "exchange": "amq.topic", "write": "^{username}\\.", "read": "^r\\."}
    assert target.req("GET", base) == (200, [want])
    assert want in target.req("GET", "/api/topic-permissions")[1]
    assert target.req("GET", f"/api/users/{user}/topic-permissions") == (200, [want])
    assert want in target.req("GET", "/api/definitions")[1]["topic_permissions"]
    # enforced over AMQP: RabbitMQ's 403 text
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", target.amqp,
                                                             credentials=pika.PlainCredentials(user, "pw")))
    ch = conn.channel()
    ch.basic_publish("amq.topic", f"{user}.ok", b"allowed")
    ch.basic_publish("amq.topic", "other.no", b"refused")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 403
    # RabbitMQ 3.11+ words it "write access to topic ..."
    assert "access to topic 'other.no' in exchange 'amq.topic' in vhost '/' refused for user 'mgmt-topic'" in \
        info.value.reply_text
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, "amq.topic", "other.#")
    assert info.value.reply_code == 403 and "access to topic 'other.#'" in info.value.reply_text
    conn.close()
    assert target.req("PUT", base, {"write": "x"})[0] == 400  # the exchange is required
    assert target.req("PUT", "/api/topic-permissions/%2F/no-such-user", {"exchange": "amq.topic"})[0] == 400
    assert target.req("GET", base, user=f"{user}:pw")[0] == 401  # administrators only
    assert target.req("DELETE", base)[0] == 204
    assert target.req("GET", f"/api/users/{user}/topic-permissions") == (200, [])
    assert target.req("DELETE", f"/api/users/{user}")[0] == 204


def test_policies(target: Target) -> None:
    pol = "/api/policies/%2F/mgmt-pol"
    assert target.req("PUT", pol, {"pattern": "^mgmt-pol-", "definition": {"max-length": 1},
                                   "apply-to": "queues", "priority": 1})[0] == 201
    status, body = target.req("GET", pol)
    assert status == 200 and body["definition"] == {"max-length": 1} and body["apply-to"] == "queues"
    assert any(p["name"] == "mgmt-pol" for p in target.req("GET", "/api/policies/%2F")[1])
    assert target.req("PUT", "/api/queues/%2F/mgmt-pol-q", {"durable": False})[0] == 201
    assert wait_for(lambda: target.req("GET", "/api/queues/%2F/mgmt-pol-q")[1].get("policy") == "mgmt-pol",
                    target.stats_wait)
    for i in range(3):
        target.req("POST", "/api/exchanges/%2F/amq.default/publish",
                   {"properties": {}, "routing_key": "mgmt-pol-q", "payload": str(i), "payload_encoding": "string"})
    assert wait_for(lambda: target.ready("/api/queues/%2F/mgmt-pol-q") == 1, target.stats_wait)
    assert target.req("PUT", "/api/policies/%2F/mgmt-bad", {"pattern": "(", "definition": {"max-length": 1}})[0] == 400
    assert target.req("DELETE", pol)[0] == 204
    assert target.req("GET", pol)[0] == 404
    assert target.req("DELETE", "/api/queues/%2F/mgmt-pol-q")[0] == 204
