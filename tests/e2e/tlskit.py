"""A throwaway certificate authority for the TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, written as PEM files (the `cryptography` package)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    #: a cluster node's link certificate: server and client at once (both key usages)
    node_cert: Path
    node_key: Path

    def client_context(self, with_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, ca_key: ec.EllipticCurvePrivateKey,
           ca: bool = False, server: bool = False, client: bool = True) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(ca_name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
    elif server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return b.sign(ca_key, hashes.SHA256())


def make_pki(where: Path) -> Pki:
    where.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("sansmq test CA")
    ca_cert = _issue("sansmq test CA", ca_key, ca_name, ca_key, ca=True)
    paths = Pki(where / "ca.pem", where / "server.pem", where / "server.key", where / "client.pem",
                where / "client.key", where / "node.pem", where / "node.key")
    paths.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    for cert_path, key_path, cn, server, client in (
            (paths.server_cert, paths.server_key, "localhost", True, False),
            (paths.client_cert, paths.client_key, "app", False, True),
            (paths.node_cert, paths.node_key, "sansmq node", True, True)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(cn, key, ca_name, ca_key, server=server, client=client)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
    return paths


def start_tls_server(kind: str, pki: Pki, where: Path) -> Any:
    """A broker (``e2ekit.ServerProcess``) with amqps, stomps and wss listeners on free ports, asking for
    client certificates (``--tls-verify-peer``); plain listeners as ``e2ekit.start_server`` opens them."""
    from e2ekit import start_server

    config = where / "sansmq-tls.toml"
    config.write_text(f'[tls]\nkey = "{pki.server_key}"\nca = "{pki.ca}"\n')
    return start_server(kind, config, "--tls-cert", str(pki.server_cert), "--tls-verify-peer",
                        "--amqps", "127.0.0.1:0", "--stomps", "127.0.0.1:0", "--wss", "127.0.0.1:0")
