"""Mutual TLS on the node-to-node link (``--cluster-tls-cert/-key/-ca``): three nodes whose links
are TLS forward publishes and relay consumers as plain ones do; a peer that does not present a
certificate of the cluster's CA (plain TCP, TLS without a certificate or with another CA's) is
refused and logged."""

from __future__ import annotations

import socket
import ssl
import sys
from pathlib import Path

import pika
from clusterkit import Node, Nodes, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from tlskit import make_pki  # noqa: E402

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"


def _answer(sock: socket.socket) -> bytes:
    """What the link answers an AMQP protocol header with, up to its close."""
    sock.settimeout(10)
    sock.sendall(AMQP_HEADER)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except (ssl.SSLError, ConnectionResetError):
        pass
    return got


def _tls_answer(ctx: ssl.SSLContext, port: int) -> bytes:
    """``_answer`` over TLS with ``ctx`` (nothing when the handshake itself is refused)."""
    with socket.create_connection(("127.0.0.1", port)) as raw:
        try:
            with ctx.wrap_socket(raw) as tls:
                return _answer(tls)
        except (ssl.SSLError, ConnectionResetError):
            return b""


def test_three_nodes_over_a_mutual_tls_link(nodes: Nodes, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = ("--cluster-tls-cert", str(pki.node_cert), "--cluster-tls-key", str(pki.node_key),
           "--cluster-tls-ca", str(pki.ca))
    a, b, c = nodes.start("a", "b", "c", extra=tls)
    a.publisher("tls-q")  # led by a
    wait_for(lambda: b.has_queue("tls-q") and c.has_queue("tls-q"), what="tls-q on b and c")
    pub = b.pika().channel()  # through b: forwarded to a over the TLS link, confirmed after a's commit
    pub.confirm_delivery()
    for i in range(20):
        pub.basic_publish("", "tls-q", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    conn = c.pika()  # through c: consumed on a over the TLS link and relayed
    ch = conn.channel()
    got = []
    for method, _, body in ch.consume("tls-q", inactivity_timeout=15):
        assert method is not None, f"only {got} arrived"
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == 20:
            break
    assert got == [b"m%d" % i for i in range(20)]
    conn.close()
    wait_for(lambda: a.api("queues/%2F/tls-q")["messages"] == 0, what="the acks reached the leader")

    # plain TCP to the link: no AMQP spoken, refused during the TLS handshake, and logged
    with socket.create_connection(("127.0.0.1", a.link)) as plain:
        answer = _answer(plain)
    assert not answer.startswith(b"\x01\x00\x00")  # no connection.start frame: nothing in clear
    # TLS, trusting the CA, but without a certificate of its own: refused too
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.load_verify_locations(str(pki.ca))
    assert _tls_answer(client, a.link) == b""
    # a node certificate of another CA: refused as well
    other = make_pki(tmp_path / "other")
    client.load_cert_chain(str(other.node_cert), str(other.node_key))
    assert _tls_answer(client, a.link) == b""
    wait_for(lambda: a.log().count("TLS handshake failed") >= 3, what="the three refusals logged")
    assert a.proc is not None and a.proc.poll() is None  # only those connections were closed
    assert _still_forwards(b)


def _still_forwards(node: Node) -> bool:
    ch = node.pika().channel()
    ch.confirm_delivery()
    ch.basic_publish("", "tls-q", b"after", pika.BasicProperties(delivery_mode=2))
    ch.connection.close()
    return True
