"""Mutual TLS on the node-to-node link (``[cluster] tls_cert``/``tls_key``/``tls_ca``,
``--cluster-tls-*``): every node presents its certificate both as the link's server and as the
client of its peers' links, and accepts only certificates signed by the cluster's CA.

A peer is authenticated by its certificate's chain to that CA, not by a host name (nodes reach each
other by the addresses they advertise, often bare IPs, as RabbitMQ's inter-node TLS with
``server_name_indication`` disabled): the CA should be the cluster's own, signing node certificates
only. A node certificate is used both ways, so it needs both extended key usages (serverAuth and
clientAuth) when it names any. The link's password (the cluster's secret) is still checked inside.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from engine.config import Cluster

from ..tls import TlsOptionsError, make_ssl_context

__all__ = ["LinkTls", "link_tls", "LINK_TLS_FLAGS"]

#: the ``--cluster-tls-FLAG`` options (and ``[cluster] tls_FLAG`` keys) and their help
LINK_TLS_FLAGS = (
    ("cert", "this node's certificate on the node-to-node link, as server and client (mutual TLS; "
             "needs --cluster-tls-ca; every node of the cluster must use TLS then)"),
    ("key", "the private key of --cluster-tls-cert (when not in that file)"),
    ("ca", "the CA bundle the other nodes' link certificates must be signed by"),
)


@dataclass(frozen=True, slots=True)
class LinkTls:
    server: ssl.SSLContext  # the link listener: a peer without a certificate of the CA is refused
    client: ssl.SSLContext  # this node's links to its peers


def link_tls(cluster: Cluster) -> LinkTls | None:
    """The link's contexts from ``cluster``'s ``tls_*`` (None: a plain TCP link); TlsOptionsError
    when the files cannot be used or the set is incomplete (TLS on the link is mutual or nothing)."""
    cert, key, ca = cluster.tls_cert, cluster.tls_key, cluster.tls_ca
    if not cert:
        if key or ca:
            raise TlsOptionsError("--cluster-tls-key and --cluster-tls-ca need --cluster-tls-cert")
        return None
    if not ca:
        raise TlsOptionsError("TLS on the node-to-node link is mutual: --cluster-tls-cert needs --cluster-tls-ca")
    server = make_ssl_context(cert, key, ca, verify_peer=True)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    client.check_hostname = False  # the CA's signature authenticates a node (module docstring)
    client.verify_mode = ssl.CERT_REQUIRED
    client.load_verify_locations(ca)  # both files loaded by make_ssl_context already: usable
    client.load_cert_chain(cert, key)
    return LinkTls(server, client)
