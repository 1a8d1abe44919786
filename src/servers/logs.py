"""Logging for operators: timestamped lines (text or JSON), an optional rotating file, and a
repetition limit so a flood of bad connections cannot fill the disk.

Components are logger names: ``sansmq`` (the server and CLI), ``sansmq.engine`` (connections,
authentication, alarms), ``sansmq.store``... The engine puts structured facts in ``extra``
(``event``, ``peer``, ``user``, ``vhost``, ``protocol``, ``reason``); the JSON format writes them out as
fields, the text format keeps the readable message.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import time
from typing import Any

__all__ = ["setup_logging", "TextFormatter", "JsonFormatter", "RepeatLimiter", "LOG_FORMATS"]

LOG_FORMATS = ("text", "json")
#: rotation of --log-file: this many bytes per file, this many old files kept
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_BACKUPS = 5
#: at most BURST lines with the same message template per WINDOW seconds and logger
BURST = 20
WINDOW = 10.0

#: LogRecord attributes that are not caller-supplied ``extra`` fields
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _timestamp(record: logging.LogRecord) -> str:
    """ISO 8601 in UTC with milliseconds, as RabbitMQ and LavinMQ print them."""
    secs = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{secs}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-11-25T00:13:32.123Z INFO    sansmq: stomp listening on 127.0.0.1:61613 (threads server)``"""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``component``, ``message`` and the extras."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "component": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class RepeatLimiter(logging.Filter):
    """Let through at most ``burst`` records per ``window`` seconds for each (logger, level,
    message template); count the rest. The first record let through after a suppression carries
    a ``suppressed`` count and says "suppressed K similar messages", so nothing is hidden silently.
    Templates, not formatted lines, are compared: 10 000 refused logins from 10 000 ports are one
    kind of line."""

    def __init__(self, burst: int = BURST, window: float = WINDOW, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        # key -> [window start, lines let through, lines suppressed]
        self._seen: dict[tuple[str, int, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        state = self._seen.get(key)
        if state is None or now - state[0] >= self.window:
            suppressed = int(state[2]) if state is not None else 0
            if len(self._seen) > 10_000:  # bounded: a few templates in practice
                self._seen.clear()
            self._seen[key] = [now, 1, 0]
            if suppressed:
                record.suppressed = suppressed
                record.msg = f"{record.msg} (suppressed {suppressed} similar messages in the last " \
                             f"{self.window:g}s)"
            return True
        if state[1] < self.burst:
            state[1] += 1
            return True
        state[2] += 1
        return False


def setup_logging(level: str = "info", fmt: str = "text", file: str | None = None, *,
                  max_bytes: int = DEFAULT_MAX_BYTES, backups: int = DEFAULT_BACKUPS,
                  burst: int = BURST, window: float = WINDOW) -> logging.Handler:
    """Configure the ``sansmq`` loggers (and the root, for libraries) once, for the CLI.

    ``file``: log there, rotated by size (``RotatingFileHandler``) instead of to stderr. Opening it
    may raise OSError, which the CLI reports as a one-line error."""
    if file:
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RepeatLimiter(burst, window))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
