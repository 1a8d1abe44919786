"""Streams whose names match a pattern (Kafka's ``subscribePattern``), from the management API.

AMQP 0-9-1 has no way to list queues, so the names come from the broker's HTTP management API
(RabbitMQ's, which sansmq serves): ``GET /api/queues/<vhost>`` page by page, keeping the queues of
type ``stream`` whose whole name matches the regular expression (as Kafka's pattern, a Java
``Pattern.matches``). The API is reached at option ``managementUrl`` (default: the first AMQP
host, port 15672) with the AMQP URL's credentials.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

from sansmq_client import Params

from .driver import BrokerUnreachable

__all__ = ["matching_streams", "default_management_url"]

PAGE_SIZE = 500  # the API's largest page


def default_management_url(endpoint: Params) -> str:
    scheme = "https" if endpoint.tls is not None else "http"
    return f"{scheme}://{endpoint.hosts[0][0]}:15672"


def matching_streams(management_url: str, endpoint: Params, pattern: str, timeout: float) -> tuple[str, ...]:
    """The streams of the endpoint's vhost whose names match ``pattern`` in full, sorted by name."""
    regex = re.compile(pattern)
    base = management_url.rstrip("/")
    token = base64.b64encode(f"{endpoint.user}:{endpoint.password}".encode()).decode()
    names: list[str] = []
    page, pages = 1, 1
    while page <= pages:
        url = f"{base}/api/queues/{quote(endpoint.vhost, safe='')}?page={page}&page_size={PAGE_SIZE}"
        request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - http(s) only
                body = json.load(answer)
        except OSError as exc:  # refused, reset, timed out, an HTTP error status
            raise BrokerUnreachable(f"listing the streams for subscribePattern at {base}: {exc}",
                                    retriable=not isinstance(exc, urllib.error.HTTPError)) from exc
        names += [q["name"] for q in body.get("items", ())
                  if q.get("type") == "stream" and regex.fullmatch(q["name"])]
        pages = int(body.get("page_count", 1))
        page += 1
    return tuple(sorted(names))


def check_management_url(url: str) -> str:
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"must be an http:// or https:// URL, got {url!r}")
    return url
