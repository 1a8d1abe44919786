"""``[cluster]`` in the config file and the ``serve`` flags that make a node."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.config_schema import ConfigError, from_mapping
from servers.cli import build_parser


def test_cluster_section_is_read_and_checked() -> None:
    cfg = from_mapping({"cluster": {"node": "a", "address": "10.0.0.1:25672", "lease": 2.5}})
    assert (cfg.cluster.node, cfg.cluster.address, cfg.cluster.lease) == ("a", "10.0.0.1:25672", 2.5)
    assert from_mapping({}).cluster.node is None and from_mapping({}).cluster.lease == 5.0
    with pytest.raises(ConfigError, match="cluster.leader: unknown key"):
        from_mapping({"cluster": {"leader": "a"}})
    with pytest.raises(ConfigError, match="cluster.lease: expected a non-negative number"):
        from_mapping({"cluster": {"lease": "soon"}})


def test_serve_flags() -> None:
    args = build_parser().parse_args(["serve", "--node", "a", "--cluster-address", "127.0.0.1:0",
                                      "--cluster-lease", "2"])
    assert (args.node, args.cluster_address, args.cluster_lease) == ("a", "127.0.0.1:0", 2.0)


def test_a_node_needs_a_postgresql_store() -> None:
    out = subprocess.run([sys.executable, "-m", "servers", "serve", "--store", "memory", "--node", "a",
                          "--cluster-address", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--no-stomp", "--no-ws", "--no-http", "--no-prometheus"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "needs a postgresql:// --store" in out.stderr


def test_the_links_tls_keys_and_flags() -> None:
    cfg = from_mapping({"cluster": {"tls_cert": "node.pem", "tls_key": "node.key", "tls_ca": "ca.pem"}})
    assert (cfg.cluster.tls_cert, cfg.cluster.tls_key, cfg.cluster.tls_ca) == ("node.pem", "node.key", "ca.pem")
    args = build_parser().parse_args(["serve", "--cluster-tls-cert", "n.pem", "--cluster-tls-ca", "ca.pem"])
    assert (args.cluster_tls_cert, args.cluster_tls_key, args.cluster_tls_ca) == ("n.pem", None, "ca.pem")


def test_tls_on_the_link_is_mutual_or_nothing(tmp_path) -> None:
    """A certificate without the CA to check the peers' with is refused at start (exit 2)."""
    out = subprocess.run([sys.executable, "-m", "servers", "serve", "--store", "postgresql://x@127.0.0.1:1/x",
                          "--node", "a", "--cluster-address", "127.0.0.1:0", "--amqp", "127.0.0.1:0",
                          "--no-stomp", "--no-ws", "--no-http", "--no-prometheus",
                          "--cluster-tls-cert", str(tmp_path / "node.pem")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--cluster-tls-cert needs --cluster-tls-ca" in out.stderr
