"""servers.logs: the text and JSON formats, the repetition limit, rotation; the config schema's lines."""

from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path

import pytest

from engine.config_schema import ConfigError, find_line, from_mapping
from servers.logs import JsonFormatter, RepeatLimiter, TextFormatter, setup_logging


def record(msg: str, *args: object, name: str = "sansmq.engine", level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    rec.created, rec.msecs = 1764030812.25, 250.0
    rec.__dict__.update(extra)
    return rec


def test_text_format_has_timestamp_level_component() -> None:
    line = TextFormatter().format(record("accepting %s connection %d", "amqp", 7))
    assert line == "2025-11-25T00:33:32.250Z INFO    sansmq.engine: accepting amqp connection 7"


def test_json_format_writes_the_extra_fields() -> None:
    line = JsonFormatter().format(record("closing connection %d", 3, event="connection.closed", peer="127.0.0.1:5",
                                         user="guest", vhost="/", protocol="stomp", reason="client sent DISCONNECT"))
    assert json.loads(line) == {
        "time": "2025-11-25T00:33:32.250Z", "level": "info", "component": "sansmq.engine",
        "message": "closing connection 3", "event": "connection.closed", "peer": "127.0.0.1:5", "user": "guest",
        "vhost": "/", "protocol": "stomp", "reason": "client sent DISCONNECT"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repeat_limiter_counts_what_it_suppresses() -> None:
    clock = Clock()
    limiter = RepeatLimiter(burst=3, window=10, clock=clock)
    passed = [limiter.filter(record("auth failed from %s", f"10.0.0.{i}")) for i in range(50)]
    assert passed == [True] * 3 + [False] * 47
    assert limiter.filter(record("another template"))  # other lines are not affected
    clock.now += 10
    rec = record("auth failed from %s", "10.0.0.99")
    assert limiter.filter(rec)
    assert rec.getMessage() == "auth failed from 10.0.0.99 (suppressed 47 similar messages in the last 10s)"
    assert rec.suppressed == 47
    assert limiter.filter(record("auth failed from %s", "x")) and limiter.filter(record("auth failed from %s", "y"))
    assert not limiter.filter(record("auth failed from %s", "z"))


def test_repeat_limiter_reports_on_its_own_schedule_and_per_kind() -> None:
    """Issue 23: suppressed counts were reported only when the next similar line came, and AMQP and
    STOMP refusals (one template) were one kind."""
    clock = Clock()
    limiter = RepeatLimiter(burst=2, window=10, clock=clock)

    def refused(protocol: str, port: int) -> logging.LogRecord:
        rec = record("user '%s' authentication failed from %s", "guest", f"10.0.0.1:{port}")
        rec.protocol = protocol
        return rec

    assert [limiter.filter(refused("stomp", i)) for i in range(5)] == [True, True, False, False, False]
    assert [limiter.filter(refused("amqp", i)) for i in range(3)] == [True, True, False]
    assert limiter.report() == []  # the windows have not ended
    clock.now += 10
    reports = {r.protocol: r for r in limiter.report()}
    assert reports["stomp"].getMessage() == ("suppressed 3 similar messages in the last 10s, the last: "
                                              "user 'guest' authentication failed from 10.0.0.1:4")
    assert reports["amqp"].suppressed == 1 and reports["amqp"].levelno == logging.INFO
    assert limiter.report() == []  # reported once
    nxt = refused("stomp", 9)
    assert limiter.filter(nxt) and "suppressed" not in nxt.getMessage()


def test_repeat_limiter_thread_writes_the_report(tmp_path: Path) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    limiter = RepeatLimiter(burst=1, window=0.2)
    handler.addFilter(limiter)
    limiter.start(handler)
    try:
        for i in range(4):
            handler.handle(record("flood %s", i))
        deadline = time.monotonic() + 5
        while "suppressed 3 similar" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        limiter.stop()
    assert "suppressed 3 similar messages in the last 0.2s, the last: flood 3" in stream.getvalue()
    # what the last window counted is written when reporting stops (the process ends), not lost
    handler.removeFilter(limiter)
    limiter = RepeatLimiter(burst=1, window=60)
    handler.addFilter(limiter)
    limiter.start(handler)
    for i in range(3):
        handler.handle(record("late %s", i))
    limiter.stop()
    assert "suppressed 2 similar messages in the last 60s, the last: late 2" in stream.getvalue()


def test_text_format_escapes_control_characters() -> None:
    """Issue 23.8: a login name with a newline forged a log line of its own in the text format."""
    rec = record("user '%s' authentication failed", "x\n2026-11-26T00:00:00.000Z INFO    sansmq: forged\r\x1b[2J")
    line = TextFormatter().format(rec)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.endswith("user 'x\\n2026-11-26T00:00:00.000Z INFO    sansmq: forged\\r\\x1b[2J' authentication failed")
    assert json.loads(JsonFormatter().format(rec))["message"].count("\n") == 1  # JSON escapes by itself


def test_log_file_rotates(tmp_path: Path) -> None:
    path = tmp_path / "sansmq.log"
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        handler = setup_logging("info", "json", str(path), max_bytes=2000, backups=2, burst=10_000)
        log = logging.getLogger("sansmq.test")
        for i in range(200):
            log.info("line %d %s", i, "x" * 40)
        handler.close()
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["sansmq.log", "sansmq.log.1", "sansmq.log.2"]
    assert all(p.stat().st_size <= 2000 for p in tmp_path.iterdir())
    last = path.read_text().splitlines()[-1]
    assert json.loads(last)["message"].startswith("line 199 ")


TEXT = """\
# a comment
anonymous_user = "guest"

[users.guest]
password = "guest"
"loopback_only" = true

[users.app]
vhosts = ["staging"]

[limits]
heartbeat = [1, 2]
"""


@pytest.mark.parametrize(("key", "line"), [
    ("anonymous_user", 2), ("users.guest.password", 5), ("users.guest.loopback_only", 6),
    ("users.app.password", 8),  # missing: its table's header
    ("users.app", 8), ("limits.heartbeat", 12), ("limits.nope", 11), ("nope", None),
])
def test_find_line(key: str, line: int | None) -> None:
    assert find_line(TEXT, key) == line


def test_from_mapping_validates_too() -> None:
    with pytest.raises(ConfigError) as err:
        from_mapping({"limits": {"heartbeat_grace": "long"}})
    assert str(err.value) == 'limits.heartbeat_grace: expected a non-negative number, got the string "long"'
    cfg = from_mapping({"default_vhost": "main", "vhosts": ["other"], "anonymous_user": ""})
    assert cfg.vhosts == ("main", "other") and cfg.default_vhost == "main" and cfg.anonymous_user is None


def test_example_config_shows_every_key() -> None:
    from pathlib import Path

    import servers
    from engine.config_schema import LIMIT_KEYS, TOP_LEVEL_KEYS, USER_KEYS, WEBSOCKET_KEYS, load

    path = Path(servers.__file__).with_name("example-config.toml")
    text = path.read_text()
    wanted = [*TOP_LEVEL_KEYS, *(f"users.app.{k}" for k in USER_KEYS), *(f"limits.{k}" for k in LIMIT_KEYS),
              *(f"websocket.{k}" for k in WEBSOCKET_KEYS)]
    found = [key for key in wanted if find_line(text, key) is not None
             and text.splitlines()[find_line(text, key) - 1].lstrip().startswith((key.rpartition(".")[2], "["))]
    assert found == wanted
    assert load(path).limits.queue_window == 2048
