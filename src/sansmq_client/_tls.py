"""TLS for ``amqps://`` (and ``stomps://``) URLs: the query parameters RabbitMQ's URI spec names.

``cacertfile`` (default: the system's CAs), ``certfile``/``keyfile`` (a client certificate),
``verify`` (``verify_peer``, the default, or ``verify_none``) and ``server_name_indication`` (the name
checked in the broker's certificate; default the host connected to)."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

__all__ = ["Tls", "TLS_PARAMS", "tls_from_query"]

TLS_PARAMS = ("cacertfile", "certfile", "keyfile", "verify", "server_name_indication")


@dataclass(frozen=True, slots=True)
class Tls:
    """How to speak TLS to the broker."""

    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True  # verify=verify_none turns checking the broker's certificate off
    server_name: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.cacertfile)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx

    def server_hostname(self, host: str) -> str:
        """The name checked in the broker's certificate when connecting to ``host``."""
        return self.server_name or host

    def wrap(self, sock: socket.socket, host: str) -> ssl.SSLSocket:
        """``sock`` (connected, blocking) after the TLS handshake with ``host``."""
        return self.context().wrap_socket(sock, server_hostname=self.server_hostname(host))


def tls_from_query(params: dict[str, str], url: str) -> Tls:
    """The TLS settings among a URL's query parameters (the caller checked the names)."""
    verify = params.get("verify", "verify_peer")
    if verify not in ("verify_peer", "verify_none"):
        raise ValueError(f"url parameter verify must be verify_peer or verify_none, got {verify!r}: {url!r}")
    return Tls(params.get("cacertfile"), params.get("certfile"), params.get("keyfile"), verify == "verify_peer",
               params.get("server_name_indication"))
