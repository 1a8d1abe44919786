"""The management HTTP API as a WSGI app: RabbitMQ's paths mapped to the route groups' handlers.

Each group of routes (queues, exchanges, bindings, users...) lives in its own module; this one
holds the route table and the WSGI entry: authentication, dispatch, and the JSON answer. Path
segments are percent-decoded one by one from the raw request URI, so ``%2F`` names the vhost ``/``.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

from . import audit
from .access import AccessRoutes
from .auth import MANAGEMENT_TAGS, authenticate
from .bindings import BindingRoutes
from .connections import ConnectionRoutes
from .definitions import DefinitionRoutes
from .guard import SECURITY_HEADERS, check_content_type, check_origin
from .health import HealthRoutes
from .limits import LimitRoutes
from .listing import Streamed
from .overview import OverviewRoutes
from .policies import PolicyRoutes
from .request import STATUS_LINES, HttpError, Request, not_found, unauthorised
from .static import serve_static
from .topic_permissions import TopicPermissionRoutes

__all__ = ["ManagementApi"]

#: path segments naming an exchange, by the path's first segment
_EXCHANGE_SEGMENT = {"exchanges": (2,), "bindings": (3,)}


class ManagementApi(OverviewRoutes, AccessRoutes, TopicPermissionRoutes, PolicyRoutes, BindingRoutes,
                     ConnectionRoutes, DefinitionRoutes, HealthRoutes, LimitRoutes):
    """The WSGI application (API and admin page). ``call`` runs a function on the broker's thread
    and returns its result (``Driver.call_soon`` plus a wait)."""

    def __init__(self, call: Callable[[Callable[[Any], Any]], Any], listeners: Callable[[], list[Any]],
                 node: str = "sansmq@localhost", nodes: Callable[[], list[dict[str, Any]]] | None = None,
                 cluster_name: str | None = None) -> None:
        super().__init__(call, listeners, node)
        self.cluster_nodes = nodes
        self.cluster_name = cluster_name or node
        self.routes: list[tuple[tuple[str, ...], dict[str, Callable[..., Any]]]] = [
            (("overview",), {"GET": self.overview}),
            (("whoami",), {"GET": self.whoami}),
            (("cluster-name",), {"GET": lambda r: {"name": self.cluster_name}}),
            (("nodes",), {"GET": self.nodes}),
            (("extensions",), {"GET": lambda r: []}),
            (("vhosts",), {"GET": self.vhosts}),
            (("vhosts", "*"), {"GET": self.vhost, "PUT": self.put_vhost, "DELETE": self.delete_vhost}),
            (("users",), {"GET": self.users}),
            (("users", "*"), {"GET": self.user, "PUT": self.put_user, "DELETE": self.delete_user}),
            (("users", "*", "permissions"), {"GET": self.user_permissions}),
            (("permissions",), {"GET": self.permissions}),
            (("permissions", "*", "*"), {"GET": self.permission, "PUT": self.put_permission,
                                         "DELETE": self.delete_permission}),
            (("topic-permissions",), {"GET": self.topic_permissions}),
            (("topic-permissions", "*", "*"), {"GET": self.topic_permission, "PUT": self.put_topic_permission,
                                               "DELETE": self.delete_topic_permission}),
            (("users", "*", "topic-permissions"), {"GET": self.user_topic_permissions}),
            *self.limit_routes(),
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
            (("health", "checks", "local-alarms"), {"GET": self.alarms}),
            (("health", "checks", "port-listener", "*"), {"GET": self.port_listener}),
            (("health", "checks", "protocol-listener", "*"), {"GET": self.protocol_listener}),
            (("aliveness-test", "*"), {"GET": self.aliveness}),
            (("stats", "history"), {"GET": self.history}),
        ]

    # -- WSGI --------------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def secured(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *SECURITY_HEADERS], exc_info)

        raw = environ.get("REQUEST_URI") or urllib.parse.quote(environ.get("PATH_INFO", "/"))
        path = raw.split("?", 1)[0]
        if not path.startswith("/api/") and path != "/api":
            return serve_static(path, environ, secured)
        parts = [urllib.parse.unquote(p) for p in path[len("/api/"):].split("/")]
        if parts and parts[-1] == "":
            parts.pop()
        for i in _EXCHANGE_SEGMENT.get(parts[0], ()) if parts else ():
            if len(parts) > i and parts[i] == "amq.default":  # RabbitMQ's name for the default exchange
                parts[i] = ""
        try:
            check_origin(environ)
            status, body, headers = self._dispatch(environ, parts)
        except HttpError as exc:
            status, body, headers = exc.status, {"error": exc.error, "reason": exc.reason}, []
            if exc.status == 401 and environ.get("HTTP_X_REQUESTED_WITH") != "XMLHttpRequest":
                # the admin page asks for its own login form rather than the browser's dialog
                headers = [("WWW-Authenticate", 'Basic realm="RabbitMQ Management"')]
        except TimeoutError:
            status, body, headers = 503, {"error": "timeout", "reason": "the broker did not answer"}, []
        except RecursionError:  # input nested deeper than anything here walks (JSON bodies are checked)
            status, body, headers = 400, {"error": "bad_request", "reason": "nested too deeply"}, []
        return self._respond(secured, status, body, headers)

    @staticmethod
    def _respond(start_response: Callable[..., Any], status: int, body: Any,
                 headers: list[tuple[str, str]]) -> Iterable[bytes]:
        hdrs = [("Cache-Control", "no-cache"), *headers]
        if isinstance(body, Streamed):  # sent as it is built (chunked transfer encoding)
            start_response(STATUS_LINES[status], [*hdrs, ("Content-Type", "application/json")])
            return body
        data = b"" if status == 204 or body is None else json.dumps(body, default=str).encode()
        if data:
            hdrs.append(("Content-Type", "application/json"))
        hdrs.append(("Content-Length", str(len(data))))
        start_response(STATUS_LINES.get(status, f"{status} Error"), hdrs)
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
                check_content_type(environ)
                args = [s for p, s in zip(pattern, parts, strict=True) if p == "*"]
                req = Request(environ, parts, principal)
                result = handler(req, *args)
                if not isinstance(result, tuple):
                    result = (200, result, []) if result is not None else (204, None, [])
                audit.api_change(req, result[0])
                return result
        raise not_found()
