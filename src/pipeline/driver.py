"""The Spark driver's connection to the broker: ``sansmq_client.sync`` with what the probes add.

The driver probes stream ends, checks that streams exist and parks consumers while a query idles. It
connects without reconnecting: a lost connection fails the probe in hand, and the caller retries the
whole probe on a new connection while the failure is the network's (``retriable``), since a probe's
consumers are not worth restoring. ``timeout`` bounds connecting and every wait for a delivery.
"""

from __future__ import annotations

import urllib.error
from types import TracebackType
from typing import Any

import sansmq_client
from amqpproto import spec
from sansmq_client import ChannelClosed, Params, QueueStatus, sync

__all__ = ["Driver", "StreamNotFound", "BrokerUnreachable", "retriable", "endpoint"]


class StreamNotFound(ChannelClosed):
    """queue.declare(passive) or basic.consume answered 404: the stream does not exist."""

    def __str__(self) -> str:  # what a Spark user reads: the broker's words, no channel plumbing
        return f"{self.reply_code} {self.reply_text}"

    @classmethod
    def of(cls, exc: ChannelClosed) -> ChannelClosed:
        """``exc`` as a StreamNotFound if it is a 404, else unchanged."""
        if exc.reply_code != spec.NOT_FOUND:
            return exc
        return cls(exc.reply_code, exc.reply_text, exc.method, exc.channel)


class BrokerUnreachable(Exception):
    """The broker's management API could not be reached (``retriable``: at the network, not a refusal)."""

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


def retriable(exc: BaseException) -> bool:
    """Whether ``exc`` is the broker going away (a restart, a node failing over) or unable to store a
    publish for now (a nack) rather than an answer: a refused log-in, a missing stream, a protocol
    error are final."""
    if isinstance(exc, BrokerUnreachable):
        return exc.retriable
    if isinstance(exc, ChannelClosed | sansmq_client.BrokerClosedConnection):
        return exc.reply_code == spec.CONNECTION_FORCED  # 320: the broker is shutting down
    if isinstance(exc, urllib.error.HTTPError):
        return False
    if isinstance(exc, sansmq_client.PublishNacked):
        # the broker could not take the message now (a cluster's stream whose leader is failing
        # over; RabbitMQ: a quorum queue without a leader): published again, deduplicated by the ids
        return True
    # the transport went away (or never came), its outcome unknown
    return isinstance(exc, ConnectionError | sansmq_client.ConnectionLost)


def endpoint(url: str) -> Params:
    """``amqp[s]://user:pass@host:port[,host2:port2...]/vhost[?tls options]`` (sansmq_client's parser;
    the pipeline speaks AMQP only)."""
    if url.partition("://")[0] not in ("amqp", "amqps"):
        raise ValueError(f"url must start with amqp:// or amqps:// (got {url!r})")
    return sansmq_client.parse_url(url)


class Driver:
    """One blocking connection for the driver's probes. Use as a context manager."""

    def __init__(self, url: str, timeout: float, **options: Any) -> None:
        """``options``: overrides of the URL's ``Params`` (e.g. ``hosts`` to reach one node)."""
        endpoint(url)
        self.timeout = timeout
        self.conn = sync.connect(url, connect_timeout=timeout, reconnect=False, name="sansmq pipeline driver",
                                 **options)

    @property
    def capabilities(self) -> dict[str, Any]:
        return self.conn.capabilities

    @property
    def server_properties(self) -> dict[str, Any]:
        return self.conn.server_properties

    def status(self, stream: str, arguments: dict[str, Any] | None = None) -> QueueStatus:
        """The stream's passive declare (with ``arguments``, e.g. ``admission``'s byte-bounded
        range); StreamNotFound if it does not exist."""
        try:
            return self.conn.queue_status(stream, arguments)
        except ChannelClosed as exc:
            raise StreamNotFound.of(exc) from None

    def subscribe(self, stream: str, offset: object, prefetch: int,
                  arguments: dict[str, Any] | None = None) -> sync.Subscription:
        """A consumer of ``stream`` from ``offset`` (any x-stream-offset value, e.g. a datetime)."""
        try:
            return self.conn.subscribe(stream, prefetch=prefetch, arguments={"x-stream-offset": offset,
                                                                             **(arguments or {})})
        except ChannelClosed as exc:
            raise StreamNotFound.of(exc) from None

    def close(self) -> None:
        """Close; never raises (the connection may be gone already)."""
        try:
            self.conn.close()
        except sansmq_client.ClientError:
            pass

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
