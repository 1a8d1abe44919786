"""sansmq_client: AMQP 0-9-1 and STOMP 1.2 clients on the sansmq codecs, for asyncio, trio and threads.

    conn = await sansmq_client.asyncio.connect("stomp://guest:guest@localhost:61613/")
    conn = await sansmq_client.trio.connect("amqp://guest:guest@h1:5672,h2:5673/vhost")
    conn = sansmq_client.sync.connect("amqp://localhost/")

Every front end has the same calls (awaited in the async ones): ``publish`` (confirmed by default),
``subscribe`` (async iterator; sync: iterator or callback), ``ack``/``nack``/``reject``,
``declare_queue``/``declare_exchange``/``bind_queue`` (AMQP), ``transaction()``, ``close()``.

What the clients guarantee: heart-beats are answered by the connection's own I/O task or thread, never
by user code; a lost connection is re-established (back-off, next host) with its declarations and
consumers restored, a stream consumer resuming after the last offset it acked; in-flight publishes
fail with ``ConnectionLost`` instead of vanishing; broker refusals raise typed errors
(``BrokerClosedConnection``, ``ChannelClosed``, ``BrokerError``) that name the code, text, method and
channel. ``BasicProperties`` (AMQP message properties) is re-exported from amqpproto. Front-end
modules are imported on demand (``sansmq_client.trio`` needs trio). ``amqps://`` and ``stomps://``
speak TLS. ``sansmq_client.bulk`` reads stream ranges into columns and publishes batches with confirms
on the sync front end (data pipelines).
"""

from amqpproto.spec import BasicProperties

from ._bulk import Batch, OnConfirm
from ._errors import (
    BrokerClosedConnection,
    BrokerError,
    ChannelClosed,
    ClientError,
    ConnectionClosedByUser,
    ConnectionLost,
    ConsumerCancelled,
    NotSupported,
    PublishNacked,
    Unroutable,
)
from ._model import Delivery, QueueStatus
from ._tls import Tls
from ._url import Params, parse_url

__all__ = [
    "ClientError", "ConnectionLost", "ConnectionClosedByUser", "BrokerClosedConnection", "ChannelClosed",
    "BrokerError", "PublishNacked", "ConsumerCancelled", "NotSupported", "Delivery", "QueueStatus", "Params",
    "parse_url",
    "BasicProperties", "Unroutable", "Tls", "Batch", "OnConfirm",
]
