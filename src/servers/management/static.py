"""The admin page's static files (HTML, JS, CSS shipped in ``www/``; no build step)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["serve_static"]

WWW = Path(__file__).resolve().parent / "www"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
#: the only files served: what is in www/ at import time (no path from the request reaches the disk)
_FILES = {f"/{p.name}": p for p in WWW.iterdir() if p.suffix in _TYPES} if WWW.is_dir() else {}


def serve_static(path: str, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    file = _FILES.get("/index.html" if path in ("/", "") else path)
    if file is None or environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
        body = b"Not Found"
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    data = file.read_bytes()
    start_response("200 OK", [("Content-Type", _TYPES[file.suffix]), ("Content-Length", str(len(data))),
                              ("Cache-Control", "no-cache")])
    return [b"" if environ["REQUEST_METHOD"] == "HEAD" else data]
