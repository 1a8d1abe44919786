"""Connection URLs: several hosts, defaults, credentials, options; bad ones refused with the reason."""

from __future__ import annotations

import pytest

from sansmq_client import parse_url


def test_several_hosts_with_vhost_and_options() -> None:
    p = parse_url("amqp://u%40x:p%3Aw@h1:5673,h2,[::1]:5674/prod%2Fa?heartbeat=5&reconnect_delay=0.5&name=billing")
    assert p.protocol == "amqp"
    assert p.hosts == (("h1", 5673), ("h2", 5672), ("::1", 5674))
    assert (p.user, p.password, p.vhost) == ("u@x", "p:w", "prod/a")
    assert (p.heartbeat, p.reconnect_delay, p.name) == (5.0, 0.5, "billing")


def test_defaults_per_protocol() -> None:
    p = parse_url("stomp://localhost")
    assert p.hosts == (("localhost", 61613),)
    assert (p.user, p.password, p.vhost, p.heartbeat) == ("guest", "guest", "/", 10.0)
    assert parse_url("amqp://").hosts == (("127.0.0.1", 5672),)


def test_tls_urls_take_rabbitmqs_parameters() -> None:
    p = parse_url("amqps://u:p@n1,n2:5700/v?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem&heartbeat=5")
    assert (p.protocol, p.hosts, p.vhost, p.heartbeat) == ("amqp", (("n1", 5671), ("n2", 5700)), "v", 5.0)
    assert p.tls is not None and (p.tls.cacertfile, p.tls.certfile, p.tls.keyfile, p.tls.verify) == (
        "/ca.pem", "/c.pem", "/k.pem", True)
    tls = parse_url("stomps://h?verify=verify_none&server_name_indication=broker.example").tls
    assert tls is not None and (tls.verify, tls.server_hostname("h")) == (False, "broker.example")
    assert parse_url("stomps://h").hosts == (("h", 61614),) and parse_url("amqp://h").tls is None


@pytest.mark.parametrize("url, why", [
    ("http://h/", "amqp://, amqps://, stomp:// or stomps://"),
    ("amqp://h/?hartbeat=1", "unknown URL options"),
    ("amqp://h:notaport/", "bad port"), ("amqp://h:70000/", "bad port"),
    ("amqp://:5672/", "empty host"),
    ("amqp://h/?cacertfile=/ca.pem", "are for amqps:// and stomps:// only"),
    ("amqps://h/?verify=maybe", "verify must be verify_peer or verify_none"),
])
def test_bad_urls(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_url(url)
