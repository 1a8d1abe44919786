"""Operator log lines of the engine: connections, authentication, alarms.

One line per connection event, never per message, so the hot paths pay nothing. Each line carries
its facts twice: readable in the message (RabbitMQ's wording where it has one) and as structured
``extra`` fields (``event``, ``peer``, ``user``, ``vhost``, ``protocol``, ``reason``...) that a JSON
formatter writes out. The engine never reads a clock: the log formatter adds the timestamp.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol


class Session(Protocol):
    """What the log lines read of a session (named here: sessions import this module)."""

    PROTOCOL: str
    conn_id: int
    peer: tuple[Any, ...]
    carrier: Any

__all__ = ["log", "format_peer", "accepted", "authenticated", "auth_failed", "closed", "memory_alarm",
           "disk_alarm", "channel_error", "connection_error"]

log = logging.getLogger("sansmq.engine")

#: the reason logged when the peer closed its socket without its protocol's goodbye (RabbitMQ's wording)
EOF_REASON = "client unexpectedly closed TCP connection"


def format_peer(peer: tuple[Any, ...]) -> str:
    if len(peer) < 2:
        return "?"
    host, port = str(peer[0]), peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def protocol_of(session: Session) -> str:
    inner = getattr(session, "inner", None)  # a WebSocket carrier names what it carries
    if inner is not None:
        return f"{inner.PROTOCOL}/ws"
    if session.carrier is not None:
        return f"{session.PROTOCOL}/ws"
    return session.PROTOCOL


def _who(session: Session) -> dict[str, Any]:
    inner = getattr(session, "inner", None)
    facts = inner if inner is not None else session
    user = getattr(facts, "user", None)
    vhost = getattr(facts, "vhost", None)
    return {
        "conn_id": session.conn_id,
        "peer": format_peer(session.peer),
        "protocol": protocol_of(session),
        "user": user.name if user is not None else None,
        "vhost": vhost.name if vhost is not None else None,
    }


def accepted(conn_id: int, protocol: str, peer: tuple[Any, ...]) -> None:
    if not log.isEnabledFor(logging.INFO):  # nothing is built for a line nobody reads
        return
    where = format_peer(peer)
    log.info("accepting %s connection %d from %s", protocol, conn_id, where,
             extra={"event": "connection.accepted", "conn_id": conn_id, "peer": where, "protocol": protocol})


def authenticated(session: Session) -> None:
    if not log.isEnabledFor(logging.INFO):  # nothing is built for a line nobody reads
        return
    facts = _who(session)
    log.info("connection %d (%s, %s): user '%s' authenticated and granted access to vhost '%s'",
             session.conn_id, facts["peer"], facts["protocol"], facts["user"], facts["vhost"],
             extra={"event": "connection.authenticated", **facts})


def auth_failed(session: Session, user: str | None, mechanism: str, why: str) -> None:
    if not log.isEnabledFor(logging.WARNING):  # nothing is built for a line nobody reads
        return
    facts = _who(session)
    facts["user"] = user
    log.warning("connection %d (%s, %s): user '%s' authentication failed using %s: %s",
                session.conn_id, facts["peer"], facts["protocol"], user or "", mechanism, why,
                extra={"event": "auth.failed", "mechanism": mechanism, "reason": why, **facts})


def _about(level: int, session: Session, head: str, tail: str, args: tuple[Any, ...], event: str,
           **extra: Any) -> None:
    """``{head} connection N (peer, protocol, vhost: 'v', user: 'u'){tail}``: one template per kind of
    line (the repeat limiter compares templates)."""
    if not log.isEnabledFor(level):  # nothing is built for a line nobody reads
        return
    facts = _who(session)
    log.log(level, f"{head} connection %d (%s, %s, vhost: '%s', user: '%s'){tail}",
            session.conn_id, facts["peer"], facts["protocol"], facts["vhost"] or "", facts["user"] or "", *args,
            extra={"event": event, **extra, **facts})


def channel_error(session: Session, channel: int, code: int, text: str) -> None:
    """An AMQP channel closed by the broker (403, 404, 406...: RabbitMQ logs each "channel error")."""
    _about(logging.WARNING, session, "channel error on", ", channel %d: %d %s", (channel, code, text),
           "channel.error", channel=channel, code=code, reason=text)


def connection_error(session: Session, what: str) -> None:
    """A connection the broker closes or refuses because of an error (a protocol error, a refused
    handshake, a limit); the "closing connection" line follows."""
    _about(logging.WARNING, session, "error on", ": %s", (what,), "connection.error", reason=what)


def closed(session: Session, reason: str) -> None:
    _about(logging.INFO, session, "closing", ": %s", (reason,), "connection.closed", reason=reason)


def memory_alarm(on: bool, queued: int, mark: int) -> None:
    if on:
        log.warning("memory alarm set: %d bytes of queued messages, unfinished input and subscriptions above the high "
                    "watermark of %d; publishing connections are blocked", queued, mark,
                    extra={"event": "alarm.set", "alarm": "memory", "queued_bytes": queued, "watermark": mark})
    else:
        log.info("memory alarm cleared: %d bytes of queued messages, unfinished input and subscriptions, watermark %d; "
                 "publishers unblocked", queued, mark,
                 extra={"event": "alarm.clear", "alarm": "memory", "queued_bytes": queued, "watermark": mark})


def disk_alarm(on: bool, free: int, limit: int) -> None:
    if on:
        log.warning("disk alarm set: %d bytes free on the data directory's disk, below the limit of %d; "
                    "publishing connections are blocked", free, limit,
                    extra={"event": "alarm.set", "alarm": "disk", "disk_free": free, "disk_free_limit": limit})
    else:
        log.info("disk alarm cleared: %d bytes free, limit %d; publishers unblocked", free, limit,
                 extra={"event": "alarm.clear", "alarm": "disk", "disk_free": free, "disk_free_limit": limit})


def handshake_timeout(session: Session, seconds: float) -> None:
    """A connection that did not log in within ``handshake_timeout`` (RabbitMQ logs these too)."""
    facts = _who(session)
    log.warning("connection %d (%s, %s): handshake not finished within %g s; closing it",
                session.conn_id, facts["peer"], facts["protocol"], seconds,
                extra={"event": "connection.handshake_timeout", "timeout": seconds, **facts})
