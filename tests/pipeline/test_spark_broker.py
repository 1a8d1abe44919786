"""Reaching the broker: amqps:// with a client certificate and a cluster's several hosts in the URL
(tried in order), and a query that outlives a broker restart."""

from __future__ import annotations

from pathlib import Path

from e2ekit import start_server
from tlskit import make_pki

from pipeline.client import Client


def test_amqps_with_a_client_certificate_and_several_hosts(spark, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    config = tmp_path / "sansmq.toml"
    config.write_text(f'[tls]\nkey = "{pki.server_key}"\nca = "{pki.ca}"\n')
    srv = start_server("threads", config, "--tls-cert", str(pki.server_cert), "--tls-verify-peer",
                       "--amqps", "127.0.0.1:0", "--stomps", "127.0.0.1:0", "--wss", "127.0.0.1:0")
    try:
        port = srv.port("amqps")
        # the first host refuses (nothing listens on port 1): the next one is tried
        url = (f"amqps://guest:guest@127.0.0.1:1,localhost:{port}/%2F?cacertfile={pki.ca}"
               f"&certfile={pki.client_cert}&keyfile={pki.client_key}")
        with Client(url) as c:
            c.declare("pipe-tls", {"x-queue-type": "stream"})
        rows = spark.createDataFrame([(f"secret {i}",) for i in range(200)], "body string").repartition(2)
        rows.write.format("sansmq").option("url", url).option("stream", "pipe-tls").mode("append").save()
        got = spark.read.format("sansmq").option("url", url).option("stream", "pipe-tls").load()
        assert sorted(r.body for r in got.collect()) == sorted(f"secret {i}".encode() for i in range(200))
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
