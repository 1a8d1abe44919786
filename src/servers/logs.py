"""Logging for operators: timestamped lines (text or JSON), an optional rotating file, and a
repetition limit so a flood of bad connections cannot fill the disk.

Components are logger names: ``sansmq`` (the server and CLI), ``sansmq.engine`` (connections,
authentication, alarms), ``sansmq.store``... The engine puts structured facts in ``extra``
(``event``, ``peer``, ``user``, ``vhost``, ``protocol``, ``reason``); the JSON format writes them out as
fields, the text format keeps the readable message.
"""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import sys
import threading
import time
from typing import Any

__all__ = ["setup_logging", "TextFormatter", "JsonFormatter", "RepeatLimiter", "LOG_FORMATS", "escape_controls"]

LOG_FORMATS = ("text", "json")
#: rotation of --log-file: this many bytes per file, this many old files kept
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_BACKUPS = 5
#: at most BURST lines with the same message template per WINDOW seconds and logger
BURST = 20
WINDOW = 10.0

#: LogRecord attributes that are not caller-supplied ``extra`` fields
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


#: control characters as visible escapes: a login name or a queue name holding a newline cannot
#: start a line of its own (forge an entry) in the text format; JSON escapes them by itself
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} | {
    0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def escape_controls(text: str) -> str:
    return text.translate(_ESCAPES)


def _timestamp(record: logging.LogRecord) -> str:
    """ISO 8601 in UTC with milliseconds, as RabbitMQ and LavinMQ print them."""
    secs = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{secs}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-11-25T00:13:32.123Z INFO    sansmq: stomp listening on 127.0.0.1:61613 (threads server)``"""

    def format(self, record: logging.LogRecord) -> str:
        message = escape_controls(record.getMessage())
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {message}"
        if record.exc_info:  # a traceback is ours, several lines by nature
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
    """Let through at most ``burst`` records per ``window`` seconds for each kind of line: (logger,
    level, message template, protocol), so 10 000 refused logins from 10 000 ports are one kind
    and AMQP and STOMP refusals two. The rest are counted, and the count is reported when the
    window ends: by ``report`` (called every ``window`` seconds by the reporter thread that
    ``start`` runs) or by the first line of that kind after it, whichever comes first, so a
    flood that stops is still accounted for, and nothing is hidden silently."""

    def __init__(self, burst: int = BURST, window: float = WINDOW, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        # key -> [window start, lines let through, lines suppressed, the last suppressed record]
        self._seen: dict[tuple[str, int, str, str | None], list[Any]] = {}
        self._lock = threading.Lock()  # the reporter thread and the logging threads share _seen
        #: the reporter thread's stop event and the handler it writes to, once started
        self._reporting: tuple[threading.Event, logging.Handler] | None = None

    @staticmethod
    def _key(record: logging.LogRecord) -> tuple[str, int, str, str | None]:
        return record.name, record.levelno, str(record.msg), getattr(record, "protocol", None)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "suppressed_report", False):
            return True  # our own summary line
        key = self._key(record)
        with self._lock:
            now = self.clock()
            state = self._seen.get(key)
            if state is None or now - state[0] >= self.window:
                suppressed = int(state[2]) if state is not None else 0
                if len(self._seen) > 10_000:  # bounded: a few templates in practice
                    self._seen.clear()
                self._seen[key] = [now, 1, 0, None]
                if suppressed:
                    record.suppressed = suppressed
                    record.msg = f"{record.msg} (suppressed {suppressed} similar messages in the last " \
                                 f"{self.window:g}s)"
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            state[3] = record  # formatted only if reported
            return False

    def report(self, final: bool = False) -> list[logging.LogRecord]:
        """One summary record per kind whose window ended (every kind when ``final``: the process
        ends) with lines suppressed; its count is then reset, so the next line of that kind does not
        report it again."""
        out = []
        with self._lock:
            now = self.clock()
            for (name, level, template, protocol), state in list(self._seen.items()):
                if state[2] and (final or now - state[0] >= self.window):
                    record = logging.LogRecord(
                        name, level, __file__, 0, "suppressed %d similar messages in the last %gs, the last: %s",
                        (int(state[2]), self.window, state[3].getMessage()), None)
                    record.suppressed = int(state[2])
                    record.suppressed_report = True
                    record.event = "log.suppressed"
                    if protocol is not None:
                        record.protocol = protocol
                    out.append(record)
                    del self._seen[(name, level, template, protocol)]
        return out

    def start(self, handler: logging.Handler) -> None:
        """Report suppressed counts through ``handler`` every ``window`` seconds (a daemon thread)."""
        stop = threading.Event()
        self._reporting = (stop, handler)

        def run() -> None:
            while not stop.wait(self.window):
                for record in self.report():
                    handler.handle(record)

        threading.Thread(target=run, name="sansmq-log-repeat-report", daemon=True).start()
        atexit.register(self.stop)  # the counts of the last window are written before exiting

    def stop(self) -> None:
        """Stop reporting, after writing what is still counted."""
        if self._reporting is not None and not self._reporting[0].is_set():
            stop, handler = self._reporting
            stop.set()
            for record in self.report(final=True):
                handler.handle(record)


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
    limiter = RepeatLimiter(burst, window)
    handler.addFilter(limiter)
    root = logging.getLogger()
    for old in list(root.handlers):
        for f in old.filters:
            if isinstance(f, RepeatLimiter):
                f.stop()
        root.removeHandler(old)
    limiter.start(handler)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
