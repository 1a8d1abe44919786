"""What the management listener refuses before a handler runs, and the headers it always sends.

Cross-site request forgery: a web page of another origin can make a browser send a form post or
a "simple" fetch (text/plain, no custom header) with the user's saved credentials. Such a request
either carries a foreign ``Origin`` (refused on every state-changing method) or a body that is not
``application/json`` (415, as RabbitMQ's API, which accepts only JSON). Framing (clickjacking) is
refused by ``X-Frame-Options`` and the CSP's ``frame-ancestors``.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .request import HttpError

__all__ = ["SECURITY_HEADERS", "check_origin", "check_content_type"]

SECURITY_HEADERS = [("X-Frame-Options", "DENY"), ("Content-Security-Policy", "frame-ancestors 'none'"),
                    ("X-Content-Type-Options", "nosniff")]
#: methods that change something (a browser sends Origin on all of them, also on same-site forms)
STATE_CHANGING = frozenset({"POST", "PUT", "DELETE", "PATCH"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(scheme: str, netloc: str) -> tuple[str, int] | None:
    try:
        parts = urllib.parse.urlsplit(f"{scheme}://{netloc}")
        return (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:  # a malformed port
        return None


def _own_origins(environ: dict[str, Any]) -> list[tuple[str, tuple[str, int] | None]]:
    """(scheme, (host, port)) this listener is reached as: its ``Host``, and the one a reverse proxy
    names (X-Forwarded-Proto/-Host: a cross-site page cannot send those without a CORS preflight,
    which this listener never grants)."""
    scheme = environ.get("wsgi.url_scheme", "http")
    out = [(scheme, _host_port(scheme, environ.get("HTTP_HOST", "")))]
    forwarded = environ.get("HTTP_X_FORWARDED_HOST")
    if forwarded:
        proto = environ.get("HTTP_X_FORWARDED_PROTO", scheme).split(",")[0].strip().lower()
        out.append((proto, _host_port(proto, forwarded.split(",")[0].strip())))
    return out


def check_origin(environ: dict[str, Any]) -> None:
    """403 for a state-changing request whose ``Origin`` is not this listener's own."""
    origin = environ.get("HTTP_ORIGIN")
    if origin is None or environ["REQUEST_METHOD"] not in STATE_CHANGING:
        return  # not from a browser's cross-origin context (curl, rabbitmqadmin), or only a read
    given = urllib.parse.urlsplit(origin.strip()) if origin.strip() != "null" else None
    if given is None or not any(
            host is not None and given.scheme == scheme and _host_port(scheme, given.netloc) == host
            for scheme, host in _own_origins(environ)):
        raise HttpError(403, "forbidden", f"cross-origin request refused (Origin: {origin})")


def check_content_type(environ: dict[str, Any]) -> None:
    """415 for a request body that is not JSON (an empty body needs no type: curl -X PUT)."""
    if environ["REQUEST_METHOD"] not in _BODY_METHODS:
        return
    if environ.get("CONTENT_LENGTH") in (None, "", "0") and "chunked" not in environ.get(
            "HTTP_TRANSFER_ENCODING", "").lower():
        return
    kind = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise HttpError(415, "unsupported_media_type", f"expected an application/json body, not {kind or 'none'}")
