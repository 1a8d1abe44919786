"""The disk alarm: the server samples the free space and tells the engine (``disk_free_sampled``);
below ``disk_free_limit`` publishers are blocked as by the memory alarm (AMQP connection.blocked
"low on disk", reading paused for STOMP), and released once the space is back. Simulated with
engine.testing (the engine never reads a disk)."""

from __future__ import annotations

import pytest
from enginetest_helpers import connected, new_net, send
from test_engine_amqp_limits import KB, amqp, declare, publish

from amqpproto import spec
from engine import Config, Limits
from engine.config_schema import ConfigError, from_mapping

MB = 1000 * 1000


def test_low_disk_blocks_publishers_until_space_returns() -> None:
    net = new_net(Config(disk_free_limit=50 * MB))
    broker = net.broker
    pub = amqp(net, {"connection.blocked": True})
    quiet = amqp(net, {"connection.blocked": True})  # never publishes: never blocked
    stomp = connected(net)
    declare(pub, "d")
    publish(pub, "d", b"x")
    send(stomp, "/queue/d", b"y")
    net.run_until_idle()
    broker.disk_free_sampled(60 * MB, net.now)
    net.run_until_idle()
    assert not broker.disk_alarm and not pub.paused and not stomp.paused
    broker.disk_free_sampled(50 * MB - 1, net.now)
    net.run_until_idle()
    assert broker.disk_alarm and not broker.mem_alarm
    assert [b.reason for b in pub.of(spec.ConnectionBlocked)] == ["low on disk"]
    assert pub.paused and stomp.paused and not quiet.paused and not quiet.of(spec.ConnectionBlocked)
    broker.disk_free_sampled(50 * MB, net.now)  # at the limit: enough again
    net.run_until_idle()
    assert not broker.disk_alarm and not pub.paused and not stomp.paused
    assert len(pub.of(spec.ConnectionUnblocked)) == 1


def test_both_alarms_name_both_and_release_only_when_both_clear() -> None:
    net = new_net(Config(limits=Limits(memory_high_watermark=4 * KB), disk_free_limit=10 * MB))
    broker = net.broker
    pub = amqp(net, {"connection.blocked": True})
    declare(pub, "m")
    broker.disk_free_sampled(1, net.now)
    for _ in range(5):
        publish(pub, "m", b"a" * KB)
    net.run_until_idle()
    assert broker.disk_alarm and broker.mem_alarm and pub.paused
    assert broker.alarm_reason() == "low on memory & low on disk"
    broker.set_disk_free_limit(0, net.now)  # 0: no disk alarm (rabbitmqctl set_disk_free_limit)
    net.run_until_idle()
    assert not broker.disk_alarm and pub.paused and broker.alarm_reason() == "low on memory"
    broker.run_command(lambda b: b.model.purge(b.model.vhosts["/"].queues["m"]), net.now)
    net.run_until_idle()
    assert not broker.publishers_blocked and not pub.paused
    assert len(pub.of(spec.ConnectionBlocked)) == 1 and len(pub.of(spec.ConnectionUnblocked)) == 1


def test_no_sample_no_alarm() -> None:
    net = new_net(Config(disk_free_limit=10**15))
    pub = amqp(net, {"connection.blocked": True})
    publish(pub, "", b"x")
    net.run_until_idle()
    assert not net.broker.disk_alarm and not pub.paused


@pytest.mark.parametrize(("value", "limit", "relative"), [
    (123, 123, None), ("50MB", 50 * MB, None), ("1GB", 10**9, None), ("2GiB", 2 * 1024**3, None),
    ("512M", 512 * 1024**2, None), ({"absolute": "3GB"}, 3 * 10**9, None), ({"relative": 1.5}, 50 * MB, 1.5),
])
def test_disk_free_limit_config_forms(value: object, limit: int, relative: float | None) -> None:
    cfg = from_mapping({"disk_free_limit": value})
    assert (cfg.disk_free_limit, cfg.disk_free_limit_relative) == (limit, relative)


@pytest.mark.parametrize("value", ["lots", -1, {"absolute": "1XB"}, {"relative": "x"}, {"other": 1},
                                   {"absolute": 1, "relative": 1.0}])
def test_bad_disk_free_limit_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="disk_free_limit"):
        from_mapping({"disk_free_limit": value})


def test_default_is_rabbitmqs_50mb() -> None:
    assert Config().disk_free_limit == 50 * MB
