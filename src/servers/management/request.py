"""HTTP plumbing of the management API: its errors, the request object, status lines and
the bounds on a request."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from .auth import Principal

#: a longer one is a 400 as there, and past twice this the HTTP server refuses it (413) unread
MAX_BODY = 10_000_000
#: deepest JSON nesting accepted in a body: what is stored (arguments, policy definitions) is later
#: walked recursively (persisted, exported), which a document nested thousands deep would break
MAX_DEPTH = 64
#: how long a request waits for the broker's thread
COMMAND_TIMEOUT = 10.0

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


STATUS_LINES = {200: "200 OK", 201: "201 Created", 204: "204 No Content", 400: "400 Bad Request",
           401: "401 Unauthorized", 403: "403 Forbidden", 404: "404 Not Found",
           405: "405 Method Not Allowed", 413: "413 Request Entity Too Large", 415: "415 Unsupported Media Type",
           500: "500 Internal Server Error", 503: "503 Service Unavailable"}


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
            except RecursionError:  # a deeply nested document: the parser's recursion ran out
                raise bad_request(f"not_json: nested deeper than {MAX_DEPTH} levels") from None
            if too_deep(self._body):
                raise bad_request(f"not_json: nested deeper than {MAX_DEPTH} levels")
            if not isinstance(self._body, dict):
                raise bad_request("not_json_object")
        return self._body


def too_deep(doc: Any) -> bool:
    """Whether ``doc`` nests lists/objects deeper than MAX_DEPTH (a walk over its containers only)."""
    level: list[Any] = [doc]
    for _ in range(MAX_DEPTH):  # after k rounds: the containers at depth k + 1 (the document is 1)
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())
                 if isinstance(child, (dict, list))]
        if not level:
            return False
    return True


def put_status(existed: bool) -> tuple[int, None, list[tuple[str, str]]]:
    """A PUT's answer: 201 Created, or 204 when the object was there already."""
    return (204, None, []) if existed else (201, None, [])

