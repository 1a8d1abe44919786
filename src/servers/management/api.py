"""The management HTTP API: RabbitMQ's paths, JSON shapes and status codes, as a WSGI app.

Reads come from a plain-data snapshot of the broker (``engine.stats.snapshot``) taken on the
broker's thread and shared by requests for ``SNAPSHOT_TTL`` seconds; changes run as commands on
the broker's thread (``Driver.call_soon``), so no lock guards the model. Path segments are
percent-decoded one by one from the raw request URI, so ``%2F`` names the vhost ``/``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

from amqpproto import BasicProperties
from engine._message import Message
from engine._props import headers_to_props, props_to_headers
from engine.model import Consumer
from engine.model.errors import NotFound, PreconditionFailed
from engine.model.policies import Policy
from engine.model.security import DEFAULT_HASHING, UserRecord
from engine.stats import COUNTERS, snapshot

from .auth import MANAGEMENT_TAGS, Principal, authenticate
from .static import serve_static

__all__ = ["ManagementApi", "HttpError", "MAX_BODY"]

#: bytes of a request body the API accepts (RabbitMQ's management.http.max_body_size default);
#: a longer one is a 400 as there, and past twice this the HTTP server refuses it (413) unread
MAX_BODY = 10_000_000
#: how long one snapshot of the broker serves requests (counts lag traffic by at most this)
SNAPSHOT_TTL = 0.2
#: how long a request waits for the broker's thread
COMMAND_TIMEOUT = 10.0
VERSION = "3.10.8"  # the RabbitMQ management API version whose shapes this follows

JSONType = Any


class HttpError(Exception):
    def __init__(self, status: int, error: str, reason: str | list[str]) -> None:
        super().__init__(str(reason))
        self.status = status
        self.error = error
        self.reason = reason


def not_found() -> HttpError:
    return HttpError(404, "Object Not Found", "Not Found")


def unauthorised(reason: str) -> HttpError:
    """RabbitMQ answers every refusal of an authenticated user with 401 and this error."""
    return HttpError(401, "not_authorised", reason)


def bad_request(reason: str) -> HttpError:
    return HttpError(400, "bad_request", reason)


_STATUS = {200: "200 OK", 201: "201 Created", 204: "204 No Content", 400: "400 Bad Request",
           401: "401 Unauthorized", 404: "404 Not Found",
           405: "405 Method Not Allowed", 413: "413 Request Entity Too Large",
           500: "500 Internal Server Error", 503: "503 Service Unavailable"}


#: sections of a definitions file that must be lists
_DEFINITION_LISTS = ("users", "vhosts", "permissions", "policies", "queues", "exchanges", "bindings",
                     "parameters", "global_parameters", "topic_permissions")
#: path segments naming an exchange, by the path's first segment
_EXCHANGE_SEGMENT = {"exchanges": (2,), "bindings": (3,)}


class _GetHolder(Consumer):
    """The holder of messages fetched by POST .../get: never registered on the queue."""

    __slots__ = ()
    blocked = False


class _NoOwner:
    blocked = False


class Request:
    __slots__ = ("method", "parts", "query", "principal", "environ", "_body")

    def __init__(self, environ: dict[str, Any], parts: list[str], principal: Principal) -> None:
        self.environ = environ
        self.method = environ["REQUEST_METHOD"]
        self.parts = parts
        self.query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        self.principal = principal
        self._body: Any = None

    def json(self) -> Any:
        if self._body is None:
            try:
                length = int(self.environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                raise bad_request("bad Content-Length") from None
            if length > MAX_BODY:
                raise bad_request("Exceeded HTTP request body size limit")
            raw = self.environ["wsgi.input"].read(length) if length else b""
            try:
                self._body = json.loads(raw) if raw.strip() else {}
            except (ValueError, UnicodeDecodeError):
                raise bad_request("not_json") from None
            if not isinstance(self._body, dict):
                raise bad_request("not_json_object")
        return self._body


def _vhost_names(snap: dict[str, Any], who: Principal) -> list[str]:
    return [v for v in snap["vhosts"] if who.sees_vhost(v)]


def _rate(value: float) -> dict[str, float]:
    return {"rate": value}


def _message_stats(snap: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, _ in COUNTERS:
        out[name] = snap["totals"][name]
        out[f"{name}_details"] = _rate(snap["rates"][name])
    return out


def conn_name(info: dict[str, Any]) -> str:
    """RabbitMQ names a connection 'peer:port -> node:port'; ours ends with its connection id."""
    peer = info.get("peer") or ("?", 0)
    return f"{peer[0]}:{peer[1] if len(peer) > 1 else 0} -> sansmq#{info['conn_id']}"


def props_key(routing_key: str, args: dict[str, Any]) -> str:
    """RabbitMQ's binding 'properties key': the routing key ('~' when empty), plus a hash of the
    arguments when there are any."""
    key = urllib.parse.quote(routing_key, safe="") if routing_key else "~"
    if args:
        digest = base64.urlsafe_b64encode(hashlib.sha256(json.dumps(args, sort_keys=True).encode()).digest())
        key += "~" + digest[:22].decode()
    return key


def _props_dict(msg: Message) -> dict[str, Any]:
    """The message's AMQP properties as the API shows them (absent ones left out)."""
    props = headers_to_props(msg.headers, msg.persistent, msg.priority)
    out = {f.name: getattr(props, f.name) for f in dataclasses.fields(props) if getattr(props, f.name) is not None}
    if out.get("headers") == {}:
        del out["headers"]
    return out


_PROPERTY_NAMES = frozenset(f.name for f in dataclasses.fields(BasicProperties))


def _properties(given: Any) -> BasicProperties:
    """The properties of a publish through the API: unknown names ignored, integers checked (as
    RabbitMQ: 400 with reason ["not_int", name])."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise bad_request("properties must be an object")
    props = {k: v for k, v in given.items() if k in _PROPERTY_NAMES}
    for name in ("delivery_mode", "priority", "timestamp"):
        if name in props and (not isinstance(props[name], int) or isinstance(props[name], bool)):
            raise HttpError(400, "bad_request", ["not_int", name])
    if "headers" in props and not isinstance(props["headers"], dict):
        raise HttpError(400, "bad_request", ["not_table", "headers"])  # type: ignore[arg-type]
    return BasicProperties(**props)


def _put_status(existed: bool) -> tuple[int, None, list[tuple[str, str]]]:
    """A PUT's answer: 201 Created, or 204 when the object was there already."""
    return (204, None, []) if existed else (201, None, [])


def _payload(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    if truncate is not None:
        body = body[:truncate]
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode(), "base64"


class ManagementApi:
    """The WSGI application (API and admin page). ``call`` runs a function on the broker's thread
    and returns its result (``Driver.call_soon`` plus a wait)."""

    def __init__(self, call: Callable[[Callable[[Any], Any]], Any], listeners: Callable[[], list[Any]],
                 node: str = "sansmq@localhost") -> None:
        self.call = call
        self.listeners = listeners
        self.node = node
        #: sections asked for -> (monotonic time taken, snapshot)
        self._snaps: dict[tuple[str, ...], tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.routes: list[tuple[tuple[str, ...], dict[str, Callable[..., Any]]]] = [
            (("overview",), {"GET": self.overview}),
            (("whoami",), {"GET": self.whoami}),
            (("cluster-name",), {"GET": lambda r: {"name": self.node}}),
            (("nodes",), {"GET": lambda r: [self._node()]}),
            (("extensions",), {"GET": lambda r: []}),
            (("vhosts",), {"GET": self.vhosts}),
            (("vhosts", "*"), {"GET": self.vhost, "PUT": self.put_vhost, "DELETE": self.delete_vhost}),
            (("users",), {"GET": self.users}),
            (("users", "*"), {"GET": self.user, "PUT": self.put_user, "DELETE": self.delete_user}),
            (("users", "*", "permissions"), {"GET": self.user_permissions}),
            (("permissions",), {"GET": self.permissions}),
            (("permissions", "*", "*"), {"GET": self.permission, "PUT": self.put_permission,
                                         "DELETE": self.delete_permission}),
            (("policies",), {"GET": self.policies}),
            (("policies", "*"), {"GET": self.policies}),
            (("policies", "*", "*"), {"GET": self.policy, "PUT": self.put_policy, "DELETE": self.delete_policy}),
            (("queues",), {"GET": self.queues}),
            (("queues", "*"), {"GET": self.queues}),
            (("queues", "*", "*"), {"GET": self.queue, "PUT": self.put_queue, "DELETE": self.delete_queue}),
            (("queues", "*", "*", "get"), {"POST": self.get_messages}),
            (("queues", "*", "*", "contents"), {"DELETE": self.purge}),
            (("queues", "*", "*", "bindings"), {"GET": self.queue_bindings}),
            (("exchanges",), {"GET": self.exchanges}),
            (("exchanges", "*"), {"GET": self.exchanges}),
            (("exchanges", "*", "*"), {"GET": self.exchange, "PUT": self.put_exchange,
                                       "DELETE": self.delete_exchange}),
            (("exchanges", "*", "*", "publish"), {"POST": self.publish}),
            (("exchanges", "*", "*", "bindings", "source"), {"GET": self.source_bindings}),
            (("exchanges", "*", "*", "bindings", "destination"), {"GET": self.destination_bindings}),
            (("bindings",), {"GET": self.bindings}),
            (("bindings", "*"), {"GET": self.bindings}),
            (("bindings", "*", "e", "*", "*", "*"), {"GET": self.bindings_between, "POST": self.bind}),
            (("bindings", "*", "e", "*", "*", "*", "*"), {"GET": self.binding, "DELETE": self.unbind}),
            (("connections",), {"GET": self.connections}),
            (("connections", "*"), {"GET": self.connection, "DELETE": self.close_connection}),
            (("channels",), {"GET": self.channels}),
            (("consumers",), {"GET": self.consumers}),
            (("consumers", "*"), {"GET": self.consumers}),
            (("definitions",), {"GET": self.get_definitions, "POST": self.post_definitions}),
            (("definitions", "*"), {"GET": self.get_definitions, "POST": self.post_definitions}),
            (("health", "checks", "alarms"), {"GET": self.alarms}),
            (("aliveness-test", "*"), {"GET": self.aliveness}),
            (("stats", "history"), {"GET": self.history}),
        ]

    # -- WSGI --------------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        raw = environ.get("REQUEST_URI") or urllib.parse.quote(environ.get("PATH_INFO", "/"))
        path = raw.split("?", 1)[0]
        if not path.startswith("/api/") and path != "/api":
            return serve_static(path, environ, start_response)
        parts = [urllib.parse.unquote(p) for p in path[len("/api/"):].split("/")]
        if parts and parts[-1] == "":
            parts.pop()
        for i in _EXCHANGE_SEGMENT.get(parts[0], ()) if parts else ():
            if len(parts) > i and parts[i] == "amq.default":  # RabbitMQ's name for the default exchange
                parts[i] = ""
        try:
            status, body, headers = self._dispatch(environ, parts)
        except HttpError as exc:
            status, body, headers = exc.status, {"error": exc.error, "reason": exc.reason}, []
            if exc.status == 401 and environ.get("HTTP_X_REQUESTED_WITH") != "XMLHttpRequest":
                # the admin page asks for its own login form rather than the browser's dialog
                headers = [("WWW-Authenticate", 'Basic realm="RabbitMQ Management"')]
        except TimeoutError:
            status, body, headers = 503, {"error": "timeout", "reason": "the broker did not answer"}, []
        return self._respond(start_response, status, body, headers)

    @staticmethod
    def _respond(start_response: Callable[..., Any], status: int, body: Any,
                 headers: list[tuple[str, str]]) -> list[bytes]:
        data = b"" if status == 204 or body is None else json.dumps(body, default=str).encode()
        hdrs = [("Cache-Control", "no-cache"), *headers]
        if data:
            hdrs.append(("Content-Type", "application/json"))
        hdrs.append(("Content-Length", str(len(data))))
        start_response(_STATUS.get(status, f"{status} Error"), hdrs)
        return [data]

    def _dispatch(self, environ: dict[str, Any], parts: list[str]) -> tuple[int, Any, list[tuple[str, str]]]:
        principal = authenticate(self.snap(), environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR"))
        if principal is None:  # RabbitMQ's spellings, both of them
            raise HttpError(401, "not_authorized", "Login failed")
        if not MANAGEMENT_TAGS.intersection(principal.tags):
            raise unauthorised("Not management user")
        method = environ["REQUEST_METHOD"]
        for pattern, handlers in self.routes:
            if len(pattern) == len(parts) and all(p == "*" or p == s for p, s in zip(pattern, parts, strict=True)):
                if method == "HEAD":
                    method = "GET"
                handler = handlers.get(method)
                if handler is None:
                    raise HttpError(405, "method_not_allowed", f"{method} not allowed")
                args = [s for p, s in zip(pattern, parts, strict=True) if p == "*"]
                result = handler(Request(environ, parts, principal), *args)
                if isinstance(result, tuple):
                    return result
                return (200, result, []) if result is not None else (204, None, [])
        raise not_found()

    # -- broker access -----------------------------------------------------------------------------
    def snap(self, *sections: str, fresh: bool = False) -> dict[str, Any]:
        """A snapshot with the object lists ``sections`` (engine.stats.SECTIONS), at most
        ``SNAPSHOT_TTL`` old; requests at the same moment share one."""
        key = tuple(sorted(sections))
        with self._lock:
            cached = self._snaps.get(key)
            if fresh or cached is None or time.monotonic() - cached[0] > SNAPSHOT_TTL:
                cached = (time.monotonic(), self.call(lambda broker: snapshot(broker, key)))
                self._snaps[key] = cached
            return cached[1]

    def command(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(broker)`` on the broker's thread; the next read takes a fresh snapshot."""
        try:
            return self.call(fn)
        finally:
            with self._lock:
                self._snaps.clear()

    def _check_vhost(self, req: Request, vhost: str) -> None:
        if vhost not in self.snap()["vhosts"]:
            raise not_found()
        if not req.principal.sees_vhost(vhost):
            raise unauthorised("User not authorised to access virtual host")

    def _check_access(self, req: Request, vhost: str, access: str, kind: str, name: str) -> None:
        """401 (RabbitMQ's status for every refusal) unless the user's permission in ``vhost``
        grants ``access`` (configure, write, read) to ``name`` (the default exchange is the
        resource amq.default), as over AMQP."""
        self._check_vhost(req, vhost)
        if vhost not in req.principal.permissions:
            raise unauthorised("User not authorised to access virtual host")
        resource = "amq.default" if kind == "exchange" and name == "" else name
        if not req.principal.allows(vhost, access, resource):
            raise unauthorised("Access refused.")

    def _command_400(self, fn: Callable[[Any], Any]) -> Any:
        """A command whose refusal by the model (a bad policy, an unknown vhost...) is a 400."""
        try:
            return self.command(fn)
        except (PreconditionFailed, NotFound, ValueError, KeyError, TypeError) as exc:
            raise bad_request(str(exc)) from None

    def _admin(self, req: Request) -> None:
        if not req.principal.is_admin:
            raise unauthorised("Not administrator user")

    def _node(self) -> dict[str, Any]:
        return {"name": self.node, "type": "disc", "running": True}

    # -- overview ----------------------------------------------------------------------------------
    def overview(self, req: Request) -> Any:
        snap = self.snap()
        counts = [c for v, c in snap["counts"].items() if req.principal.sees_vhost(v)]

        def total(key: str) -> int:
            return sum(c[key] for c in counts)

        return {
            "management_version": VERSION, "rabbitmq_version": VERSION, "product_name": "sansmq",
            "product_version": "0.1.0", "cluster_name": self.node, "node": self.node,
            "erlang_version": "n/a", "rates_mode": "basic", "statistics_db_event_queue": 0,
            "exchange_types": [{"name": t, "description": "", "enabled": True}
                               for t in ("direct", "fanout", "headers", "topic")],
            "object_totals": {"connections": len(snap["connections"]),
                              "channels": sum(c["channels"] for c in snap["connections"]),
                              "exchanges": total("exchanges"), "queues": total("queues"),
                              "consumers": total("consumers")},
            "queue_totals": {"messages": total("messages"), "messages_ready": total("messages_ready"),
                             "messages_unacknowledged": total("messages_unacknowledged")},
            "message_stats": _message_stats(snap),
            "listeners": [{"node": self.node, "protocol": p, "ip_address": h, "port": port}
                          for p, h, port in self.listeners()],
            "contexts": [],
        }

    def history(self, req: Request) -> Any:
        seconds = float((req.query.get("seconds") or ["300"])[0])
        return self.call(lambda b: b.sampler.history(seconds) if b.sampler else [])

    def whoami(self, req: Request) -> Any:
        return {"name": req.principal.name, "tags": list(req.principal.tags)}

    # -- vhosts --------------------------------------------------------------------------------------
    def _vhost_info(self, snap: dict[str, Any], name: str) -> dict[str, Any]:
        counts = snap["counts"][name]
        return {"name": name, "description": "", "tags": [], "tracing": False,
                **{k: counts[k] for k in ("messages", "messages_ready", "messages_unacknowledged")}}

    def vhosts(self, req: Request) -> Any:
        snap = self.snap()
        return [self._vhost_info(snap, v) for v in _vhost_names(snap, req.principal)]

    def vhost(self, req: Request, name: str) -> Any:
        self._check_vhost(req, name)
        return self._vhost_info(self.snap(), name)

    def put_vhost(self, req: Request, name: str) -> Any:
        self._admin(req)
        req.json()
        existed = name in self.snap(fresh=True)["vhosts"]
        self.command(lambda b: b.add_vhost(name))
        return _put_status(existed)

    def delete_vhost(self, req: Request, name: str) -> Any:
        self._admin(req)
        self._check_vhost(req, name)
        self._command_400(lambda b: b.delete_vhost(name, time.time()))
        return None

    # -- users and permissions (the broker's user database) --------------------------------------
    @staticmethod
    def _user_info(user: Any) -> dict[str, Any]:
        return {"name": user.name, "tags": list(user.tags), "password_hash": user.password_hash,
                "hashing_algorithm": user.hashing_algorithm, "limits": {}}

    def users(self, req: Request) -> Any:
        self._admin(req)
        return [self._user_info(u) for u in self.snap()["users"].values()]

    def user(self, req: Request, name: str) -> Any:
        self._admin(req)
        user = self.snap()["users"].get(name)
        if user is None:
            raise not_found()
        return self._user_info(user)

    def put_user(self, req: Request, name: str) -> Any:
        self._admin(req)
        body = req.json()
        tags = body.get("tags", None)
        if isinstance(tags, str):  # RabbitMQ takes "a,b" as well as a list
            tags = [t for t in tags.split(",") if t]
        if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise bad_request("tags must be a list of strings or a comma-separated string")
        password, phash = body.get("password"), body.get("password_hash")
        algorithm = body.get("hashing_algorithm", DEFAULT_HASHING)
        old = self.snap(fresh=True)["users"].get(name)
        keep_tags = tuple(tags) if tags is not None else (old.tags if old else ())

        def put(b: Any) -> None:
            if password is not None or old is None:  # no password at all: no password login
                b.add_user(name, None if password is None else str(password), keep_tags)
            elif phash is not None:
                b.put_user(UserRecord.from_json({"name": name, "password_hash": phash,
                                                 "hashing_algorithm": algorithm, "tags": list(keep_tags)}))
            else:
                b.put_user(UserRecord(name, old.password_hash, old.hashing_algorithm, keep_tags))

        self._command_400(put)
        return _put_status(old is not None)

    def delete_user(self, req: Request, name: str) -> Any:
        self._admin(req)
        if name not in self.snap(fresh=True)["users"]:
            raise not_found()
        self.command(lambda b: b.delete_user(name, time.time()))
        return None

    def _perms(self, user: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.snap()["permissions"]
                if (user is None or p.user == user) and (vhost is None or p.vhost == vhost)]

    def permissions(self, req: Request) -> Any:
        self._admin(req)
        return self._perms()

    def user_permissions(self, req: Request, name: str) -> Any:
        self._admin(req)
        if name not in self.snap()["users"]:
            raise not_found()
        return self._perms(user=name)

    def permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        found = self._perms(name, vhost)
        if not found:
            raise not_found()
        return found[0]

    def put_permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        self._check_vhost(req, vhost)
        body = req.json()
        if name not in self.snap()["users"]:
            raise bad_request(f"user '{name}' does not exist")
        fields = [body.get(k, "") for k in ("configure", "write", "read")]
        if not all(isinstance(f, str) for f in fields):
            raise bad_request("configure, write and read must be strings (regular expressions)")
        existed = bool(self._perms(name, vhost))
        self._command_400(lambda b: b.set_permissions(name, vhost, *fields))
        return _put_status(existed)

    def delete_permission(self, req: Request, vhost: str, name: str) -> Any:
        self._admin(req)
        if not self._perms(name, vhost):
            raise not_found()
        self.command(lambda b: b.clear_permissions(name, vhost))
        return None

    # -- policies ------------------------------------------------------------------------------------
    def policies(self, req: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._check_vhost(req, vhost)
        return [p for p in self.snap()["policies"] if req.principal.sees_vhost(p["vhost"])
                and (vhost is None or p["vhost"] == vhost)]

    def policy(self, req: Request, vhost: str, name: str) -> Any:
        for p in self.policies(req, vhost):
            if p["name"] == name:
                return p
        raise not_found()

    def _policymaker(self, req: Request, vhost: str) -> None:
        self._check_vhost(req, vhost)
        who = req.principal
        if not (who.is_admin or (who.makes_policies and vhost in who.permissions)):
            raise unauthorised("User not authorised to access object")

    def put_policy(self, req: Request, vhost: str, name: str) -> Any:
        self._policymaker(req, vhost)
        body = req.json()
        existed = any(p["name"] == name for p in self.policies(req, vhost))
        doc = {"vhost": vhost, "name": name, "pattern": body.get("pattern"), "definition": body.get("definition"),
               "priority": body.get("priority", 0), "apply-to": body.get("apply-to", "all")}
        if not isinstance(doc["pattern"], str) or not isinstance(doc["definition"], dict):
            raise bad_request("pattern (a string) and definition (an object) are required")
        self._command_400(lambda b: b.set_policy(Policy.from_json(doc)))
        return _put_status(existed)

    def delete_policy(self, req: Request, vhost: str, name: str) -> Any:
        self.policy(req, vhost, name)
        self._policymaker(req, vhost)
        self.command(lambda b: b.delete_policy(vhost, name))
        return None

    # -- queues ----------------------------------------------------------------------------------------
    def _queue_info(self, snap: dict[str, Any], q: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in q.items() if k not in ("message_bytes_ready", "effective_arguments")}
        out.update({"node": self.node, "state": "running", "type": "classic",
                    "exclusive_consumer_tag": None, "message_bytes": q["message_bytes_ready"],
                    "messages_details": _rate(0.0), "messages_ready_details": _rate(0.0),
                    "messages_unacknowledged_details": _rate(0.0)})
        return out

    def queues(self, req: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._check_vhost(req, vhost)
        snap = self.snap("queues")
        seen = set(_vhost_names(snap, req.principal))
        return [self._queue_info(snap, q) for q in snap["queues"]
                if q["vhost"] in seen and (vhost is None or q["vhost"] == vhost)]

    def _find_queue(self, req: Request, vhost: str, name: str) -> dict[str, Any]:
        self._check_vhost(req, vhost)
        for q in self.snap("queues")["queues"]:
            if q["vhost"] == vhost and q["name"] == name:
                return q
        raise not_found()

    def queue(self, req: Request, vhost: str, name: str) -> Any:
        return self._queue_info(self.snap("queues"), self._find_queue(req, vhost, name))

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
            b.model.declare_queue(v, name, durable, auto_delete, None, args)
            return existed

        return _put_status(self._command_400(declare))

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
            holder = _GetHolder(q, _NoOwner(), 0, False)  # type: ignore[arg-type]
            out, tags = [], []
            for _ in range(max(0, count)):
                got = b.model.get(q, holder)
                if got is None:
                    break
                tag, entry = got
                tags.append(tag)
                msg = entry.msg
                payload, enc = _payload(msg.body, encoding, truncate)
                out.append({"payload_bytes": len(msg.body), "redelivered": entry.count > 0,
                            "exchange": msg.exchange, "routing_key": msg.routing_key,
                            "message_count": q.count, "properties": _props_dict(msg),
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

    def queue_bindings(self, req: Request, vhost: str, name: str) -> Any:
        self._find_queue(req, vhost, name)
        return [self._binding_info(b) for b in self.snap("bindings")["bindings"]
            if b["vhost"] == vhost and b["destination"] == name and b["destination_type"] == "queue"]

    # -- exchanges ----------------------------------------------------------------------------------
    def exchanges(self, req: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._check_vhost(req, vhost)
        snap = self.snap("exchanges")
        seen = set(_vhost_names(snap, req.principal))
        return [dict(x, user_who_performed_action="") for x in snap["exchanges"]
                if x["vhost"] in seen and (vhost is None or x["vhost"] == vhost)]

    def _find_exchange(self, req: Request, vhost: str, name: str) -> dict[str, Any]:
        self._check_vhost(req, vhost)
        for x in self.snap("exchanges")["exchanges"]:
            if x["vhost"] == vhost and x["name"] == name:
                return x
        raise not_found()

    def exchange(self, req: Request, vhost: str, name: str) -> Any:
        return self._find_exchange(req, vhost, name)

    def put_exchange(self, req: Request, vhost: str, name: str) -> Any:
        self._check_access(req, vhost, "configure", "exchange", name)
        body = req.json()
        xtype = body.get("type")
        if xtype not in ("direct", "fanout", "topic", "headers"):
            raise bad_request(f"unknown exchange type '{xtype}'" if xtype else "type is required")
        if name == "" or name.startswith("amq."):
            raise unauthorised("Access refused.")  # the reserved amq. prefix, as RabbitMQ words it

        def declare(b: Any) -> bool:
            v = b.model.vhosts[vhost]
            existed = name in v.exchanges
            b.model.declare_exchange(v, name, xtype, bool(body.get("durable", True)),
                                     bool(body.get("auto_delete", False)), bool(body.get("internal", False)),
                                     body.get("arguments") or None)
            return existed

        return _put_status(self._command_400(declare))

    def delete_exchange(self, req: Request, vhost: str, name: str) -> Any:
        self._find_exchange(req, vhost, name)
        self._check_access(req, vhost, "configure", "exchange", name)
        if name == "" or name.startswith("amq."):
            raise unauthorised("Access refused.")
        self.command(lambda b: b.model.delete_exchange(b.model.vhosts[vhost], name))
        return None

    def publish(self, req: Request, vhost: str, name: str) -> Any:
        self._find_exchange(req, vhost, name)
        self._check_access(req, vhost, "write", "exchange", name)
        body = req.json()
        props = _properties(body.get("properties"))
        encoding = body.get("payload_encoding", "string")
        payload = body.get("payload", "")
        if not isinstance(payload, str) or encoding not in ("string", "base64"):
            raise bad_request("payload must be a string; payload_encoding string or base64")
        try:
            data = base64.b64decode(payload, validate=True) if encoding == "base64" else payload.encode()
        except ValueError:
            raise bad_request("payload is not valid base64") from None
        routing_key = str(body.get("routing_key", ""))

        def send(b: Any) -> bool:
            model = b.model
            headers = props_to_headers(props)
            expires = None
            if props.expiration is not None:
                try:
                    expires = b.now + int(props.expiration) / 1000.0
                except ValueError:
                    raise bad_request("expiration must be a number of milliseconds") from None
            msg = Message(model.next_message_id(), name, routing_key, headers, data, props.priority or 0,
                          expires, props.delivery_mode == 2)
            return bool(model.publish(model.vhosts[vhost], name, msg, queue_priority_only=True))

        return {"routed": self._command_400(send)}  # a property of the wrong type is a 400

    # -- bindings ----------------------------------------------------------------------------------------
    @staticmethod
    def _binding_info(b: dict[str, Any]) -> dict[str, Any]:
        return dict(b, properties_key=props_key(b["routing_key"], b["arguments"]))

    def bindings(self, req: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._check_vhost(req, vhost)
        snap = self.snap("bindings")
        seen = set(_vhost_names(snap, req.principal))
        return [self._binding_info(b) for b in snap["bindings"]
                if b["vhost"] in seen and (vhost is None or b["vhost"] == vhost)]

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
            b.model.bind(v, target, v.exchanges[source], key, args)

        self.command(bind)
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
                b.model.unbind(v, target, v.exchanges[source], found["routing_key"], found["arguments"] or None)

        self.command(unbind)
        return None

    # -- connections, channels, consumers ---------------------------------------------------------
    def _conn_info(self, c: dict[str, Any]) -> dict[str, Any]:
        peer = c.get("peer") or ("", 0)
        return {"name": conn_name(c), "node": self.node, "protocol": c["protocol"], "user": c["user"],
                "vhost": c["vhost"], "channels": c["channels"], "peer_host": str(peer[0]),
                "peer_port": peer[1] if len(peer) > 1 else 0, "state": "running", "type": "network",
                "client_properties": {k: v for k, v in (c["client_properties"] or {}).items()
                                      if isinstance(k, str)}}

    def _visible_conns(self, req: Request) -> list[dict[str, Any]]:
        who = req.principal
        return [c for c in self.snap()["connections"] if who.can_monitor or c["user"] == who.name]

    def connections(self, req: Request) -> Any:
        return [self._conn_info(c) for c in self._visible_conns(req)]

    def _find_conn(self, req: Request, name: str) -> dict[str, Any]:
        for c in self._visible_conns(req):
            if conn_name(c) == name:
                return c
        raise not_found()

    def connection(self, req: Request, name: str) -> Any:
        return self._conn_info(self._find_conn(req, name))

    def close_connection(self, req: Request, name: str) -> Any:
        conn = self._find_conn(req, name)
        if not (req.principal.is_admin or conn["user"] == req.principal.name):
            raise unauthorised("Not administrator user")
        reason = req.environ.get("HTTP_X_REASON") or "Closed via management plugin"
        self.command(lambda b: b.force_close(conn["conn_id"], reason, time.time()))
        return None

    def channels(self, req: Request) -> Any:
        out = []
        for c in self._visible_conns(req):
            info = self._conn_info(c)
            for n in range(1, c["channels"] + 1):
                out.append({"name": f"{info['name']} ({n})", "number": n, "node": self.node, "user": c["user"],
                            "vhost": c["vhost"], "connection_details": {"name": info["name"],
                                                                        "peer_host": info["peer_host"],
                                                                        "peer_port": info["peer_port"]}})
        return out

    def consumers(self, req: Request, vhost: str | None = None) -> Any:
        snap = self.snap("consumers")
        names = {c["conn_id"]: conn_name(c) for c in snap["connections"]}
        seen = set(_vhost_names(snap, req.principal))
        return [{"queue": c["queue"], "consumer_tag": c["consumer_tag"], "ack_required": c["ack_required"],
                 "prefetch_count": c["prefetch_count"], "exclusive": False, "active": True, "arguments": {},
                 "channel_details": {"connection_name": names.get(c["conn_id"], "")}}
                for c in snap["consumers"]
                if c["queue"]["vhost"] in seen and (vhost is None or c["queue"]["vhost"] == vhost)]

    # -- definitions, health ------------------------------------------------------------------------
    def get_definitions(self, req: Request, vhost: str | None = None) -> Any:
        self._admin(req)
        if vhost is not None:
            self._check_vhost(req, vhost)
        doc = self.call(lambda b: b.export_definitions())
        if vhost is not None:  # RabbitMQ's per-vhost export: the vhost's objects, no users or vhosts
            doc = {k: [e for e in v if e.get("vhost") == vhost] if isinstance(v, list) else v
                   for k, v in doc.items() if k not in ("users", "vhosts", "permissions", "topic_permissions")}
        return doc

    def post_definitions(self, req: Request, vhost: str | None = None) -> Any:
        self._admin(req)
        doc = req.json()
        if vhost is not None:
            self._check_vhost(req, vhost)
            doc = {k: [dict(e, vhost=vhost) if isinstance(e, dict) else e for e in v] if isinstance(v, list) else v
                   for k, v in doc.items() if k not in ("users", "vhosts", "permissions")}
        for key, value in doc.items():
            if key in _DEFINITION_LISTS and not isinstance(value, list):
                raise bad_request(f"'{key}' must be a list")
        self._command_400(lambda b: b.import_definitions(doc))
        return None

    def alarms(self, req: Request) -> Any:
        if self.snap(fresh=True)["alarms"]["memory"]:
            return 503, {"status": "failed", "reason": "resource alarm(s) in effect in the cluster",
                         "alarms": [{"resource": "memory", "node": self.node}]}, []
        return {"status": "ok"}

    def aliveness(self, req: Request, vhost: str) -> Any:
        self._check_access(req, vhost, "configure", "queue", "aliveness-test")

        def check(b: Any) -> bool:
            model = b.model
            v = model.vhosts[vhost]
            q = model.declare_queue(v, "aliveness-test", False, False, None, None)
            model.publish(v, "", Message(model.next_message_id(), "", "aliveness-test", {}, b"test_message"))
            holder = _GetHolder(q, _NoOwner(), 0, True)  # type: ignore[arg-type]
            got = model.get(q, holder)
            return got is not None and got[1].msg.body == b"test_message"

        ok = self.command(check)
        return {"status": "ok"} if ok else (503, {"status": "failed", "reason": "aliveness test failed"}, [])

