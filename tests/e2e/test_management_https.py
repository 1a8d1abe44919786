"""The management API and Prometheus over HTTPS (``--https``, ``--prometheus-https``) from a real
``sansmq serve``: urllib and rabbitmqadmin --ssl against a throwaway CA, client certificates when
``--tls-verify-peer`` is on, a plain-HTTP client on the TLS port refused without harm."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from e2ekit import BASE_CONFIG, start_server
from tlskit import Pki, make_pki

pytestmark = pytest.mark.timeout(120)
RABBITMQADMIN = shutil.which("rabbitmqadmin")
#: the AMQPS/STOMPS/WSS listeners a certificate turns on, kept off RabbitMQ's fixed ports
NO_TLS_DEFAULTS = ("--no-amqps", "--no-stomps", "--no-wss")
AUTH = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def get(port: int, path: str, ctx: ssl.SSLContext) -> tuple[int, Any]:
    rq = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=AUTH)
    with urllib.request.urlopen(rq, context=ctx, timeout=10) as resp:
        body = resp.read()
        return resp.status, json.loads(body) if resp.headers.get("Content-Type") == "application/json" else body


def test_https_management_and_prometheus(kind: str, pki: Pki, tmp_path: Path) -> None:
    config = tmp_path / "sansmq.toml"
    config.write_text('prometheus_https = "127.0.0.1:0"\n' + BASE_CONFIG
                      + f'[tls]\ncert = "{pki.server_cert}"\nkey = "{pki.server_key}"\n')
    srv = start_server(kind, config, "--https", "127.0.0.1:0", *NO_TLS_DEFAULTS)
    try:
        port, metrics_port = srv.port("https"), srv.port("prometheus_https")
        ctx = pki.client_context(with_cert=False)
        status, overview = get(port, "/api/overview", ctx)
        assert status == 200
        assert ("https", port) in [(lst["protocol"], lst["port"]) for lst in overview["listeners"]], overview

        # a body larger than one TLS record both ways: an export after declaring many queues
        for i in range(300):
            rq = urllib.request.Request(f"https://127.0.0.1:{port}/api/queues/%2F/https-q-{i:03}", method="PUT",
                                        data=b'{"durable": true}', headers={**AUTH, "Content-Type": "application/json"})
            urllib.request.urlopen(rq, context=ctx, timeout=10).close()
        status, defs = get(port, "/api/definitions", ctx)
        assert status == 200 and len([q for q in defs["queues"] if q["name"].startswith("https-q-")]) == 300
        assert len(json.dumps(defs)) > 16 * 1024
        status, text = get(metrics_port, "/metrics", ctx)
        assert status == 200 and b"rabbitmq_queues" in text
        # a plain-HTTP client on the TLS port: refused, and the listener still serves
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            plain.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                answer = plain.recv(4096)  # a TLS alert, or nothing
            except ConnectionResetError:
                answer = b""
            assert not answer.startswith(b"HTTP/")
        # an untrusting client fails the handshake
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            get(port, "/api/overview", ssl.create_default_context())
        assert get(port, "/api/whoami", ctx)[1]["name"] == "guest"
        if RABBITMQADMIN:
            out = subprocess.run([RABBITMQADMIN, "--ssl", f"--ssl-ca-cert-file={pki.ca}", "-H", "127.0.0.1",
                                  "-P", str(port), "-u", "guest", "-p", "guest", "list", "queues", "name"],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0 and "https-q-299" in out.stdout, out.stdout + out.stderr
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def test_https_with_client_certificates(pki: Pki, tmp_path: Path) -> None:
    config = tmp_path / "sansmq.toml"
    config.write_text(BASE_CONFIG)
    srv = start_server("asyncio", config, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                       "--tls-ca", str(pki.ca), "--tls-verify-peer", "--https", "127.0.0.1:0", *NO_TLS_DEFAULTS)
    try:
        port = srv.port("https")
        assert get(port, "/api/whoami", pki.client_context())[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(port, "/api/whoami", pki.client_context(with_cert=False))
        assert get(port, "/api/whoami", pki.client_context())[0] == 200
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def test_https_needs_a_certificate(tmp_path: Path) -> None:
    import sys

    out = subprocess.run([sys.executable, "-m", "servers", "serve", "--check-config", "--https", "127.0.0.1:15671"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--https needs a certificate" in out.stderr
