"""Connection URLs: ``amqp://user:pass@h1:5672,h2:5673/vhost?heartbeat=10`` and ``stomp://...``;
``amqps://`` and ``stomps://`` speak TLS (``_tls``: ``?cacertfile=...&certfile=...&keyfile=...``).

urllib cannot parse several ``host:port`` pairs in one netloc, so the authority is split here."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

from ._tls import TLS_PARAMS, Tls, tls_from_query

__all__ = ["Params", "parse_url"]

DEFAULT_PORTS = {"amqp": 5672, "stomp": 61613, "amqps": 5671, "stomps": 61614}
_OPTIONS = ("heartbeat", "connect_timeout", "reconnect_delay", "reconnect_max_delay", "name", "reconnect",
            "send_buffer")
#: heart-beat defaults: AMQP in seconds (as tune), STOMP in milliseconds (as the heart-beat header)
DEFAULT_HEARTBEAT = {"amqp": 60.0, "stomp": 10.0}


@dataclass(frozen=True, slots=True)
class Params:
    """Everything a URL says. ``heartbeat`` is seconds for both protocols."""

    protocol: str
    hosts: tuple[tuple[str, int], ...]
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    heartbeat: float = 60.0
    connect_timeout: float = 10.0
    reconnect_delay: float = 0.1   # first back-off; doubles per failed attempt
    reconnect_max_delay: float = 5.0
    name: str = ""  # AMQP connection_name: how the management API and logs list the connection
    tls: Tls | None = None  # amqps:// and stomps://
    reconnect: bool = True  # False: a lost connection ends the client (a load generator must see it fail)
    send_buffer: int = 0  # SO_SNDBUF of the socket in bytes; 0: the kernel's autotuning


def parse_url(url: str) -> Params:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in DEFAULT_PORTS:
        raise ValueError(f"expected an amqp://, amqps://, stomp:// or stomps:// URL, got {url!r}")
    protocol = scheme.removesuffix("s")
    rest, _, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    creds, at, hostlist = authority.rpartition("@")
    if not at:
        creds, hostlist = "", authority
    user, _, password = creds.partition(":")
    hosts = tuple(_host(h, DEFAULT_PORTS[scheme]) for h in hostlist.split(",")) if hostlist else (
        ("127.0.0.1", DEFAULT_PORTS[scheme]),)
    options = dict(parse_qsl(query, strict_parsing=bool(query)))
    tls_options = {k: options.pop(k) for k in TLS_PARAMS if k in options}
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ValueError(f"unknown URL options {sorted(unknown)}")
    if tls_options and protocol == scheme:
        raise ValueError(f"URL options {sorted(tls_options)} are for amqps:// and stomps:// only: {url!r}")
    return Params(
        protocol=protocol, hosts=hosts, user=unquote(user) if creds else "guest",
        password=unquote(password) if creds else "guest",
        vhost=unquote(path) if slash and path else "/",
        heartbeat=float(options.get("heartbeat", DEFAULT_HEARTBEAT[protocol])),
        connect_timeout=float(options.get("connect_timeout", 10.0)),
        reconnect_delay=float(options.get("reconnect_delay", 0.1)),
        reconnect_max_delay=float(options.get("reconnect_max_delay", 5.0)),
        name=options.get("name", ""),
        tls=None if protocol == scheme else tls_from_query(tls_options, url),
        reconnect=_flag(options.get("reconnect", "true")),
        send_buffer=int(options.get("send_buffer", 0)),
    )


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1")


def _host(text: str, default_port: int) -> tuple[str, int]:
    if text.startswith("["):  # [::1]:5672
        host, _, port = text[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError(f"empty host in {text!r}")
    if not port:
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port in {text!r}")
    return host, int(port)
