"""Broker configuration: users, virtual hosts and limits. Loaded from a TOML file by the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["User", "Limits", "Tls", "WebSocket", "Config"]


@dataclass(slots=True)
class User:
    name: str
    #: the user's password (stored salted and hashed, as RabbitMQ's rabbit_password_hashing_sha256)
    password: str
    #: may connect only from a loopback address (RabbitMQ's ``loopback_users``); for ``guest`` a
    #: config file that does not say is true, as RabbitMQ's default (``config_schema``)
    loopback_only: bool = False
    #: vhosts this user may open; empty means all.
    vhosts: tuple[str, ...] = ()
    #: RabbitMQ's user tags (administrator, management, monitoring, policymaker)
    tags: tuple[str, ...] = ()


@dataclass(slots=True)
class Limits:
    max_frame_size: int = 16 * 1024 * 1024 + 64 * 1024  # a 16 MiB body plus headers
    #: headers one STOMP frame may carry
    max_header_count: int = 1000
    #: bytes of one STOMP header line (name, colon and value)
    max_header_line: int = 64 * 1024
    max_body_size: int = 16 * 1024 * 1024
    #: largest AMQP message body accepted (RabbitMQ's ``max_message_size``, 128 MiB by default
    #: since 3.8); a larger one closes its channel with 406 PRECONDITION_FAILED and RabbitMQ's text.
    #: ``max_body_size`` above bounds STOMP bodies.
    max_message_size: int = 128 * 1024 * 1024
    #: bytes queued for one connection above which the broker stops delivering to it and
    #: pauses reading from it; below half it resumes.
    max_outbound_buffer: int = 4 * 1024 * 1024
    #: shortest heart-beat periods (ms) the broker agrees to: (send every, receive every). CONNECTED
    #: grants the periods the client asks for, as RabbitMQ does, but never below these.
    heartbeat: tuple[int, int] = (100, 100)
    #: milliseconds a connection has, from its accept, to finish its handshake (TLS, the WebSocket
    #: upgrade, STOMP CONNECTED, AMQP connection.open-ok) before it is closed; RabbitMQ's
    #: ``handshake_timeout`` and default. 0 = no deadline
    handshake_timeout: int = 10_000
    #: the largest frame a connection may send before it has logged in (a STOMP frame before
    #: CONNECTED, an AMQP frame before connection.tune-ok, a WebSocket message before the inner
    #: handshake): RabbitMQ's pre-authentication frame_max (8192 since 4.0.8; an AMQP peer is
    #: always allowed 4096). Credentials fit; a 16 MiB frame from a stranger does not
    max_frame_size_unauthenticated: int = 8192
    #: a STOMP peer counts as dead after its heart-beat period times this factor without a byte from it
    heartbeat_grace: float = 1.5
    default_prefetch: int = 0  # 0 = unlimited, as RabbitMQ's STOMP adapter
    # -- per-connection bounds: a breach sends ERROR and closes that connection only -----------
    #: subscriptions (incl. /temp-queue ones) one STOMP connection may hold; 0 = no cap, as
    #: RabbitMQ (its ``consumer_max_per_channel`` is unlimited by default). Uncapped, they still
    #: count in the memory alarm (``memory_high_watermark``) at 512 bytes each
    max_subscriptions: int = 0
    #: transactions one connection may have open at once
    max_transactions: int = 100
    #: frames one open transaction may buffer, and their bytes (bodies + header text)
    max_tx_frames: int = 10_000
    max_tx_bytes: int = 64 * 1024 * 1024
    #: receipts held for the store's sync above which the broker pauses reading from the
    #: connection (resumed at half); bounds what a client pipelining receipts can pin (a run of
    #: AMQP confirms one sync covers is held as one)
    max_pending_receipts: int = 10_000
    #: messages a non-durable topic subscription holds (ready + unacked) before dropping the
    #: oldest ready one (RabbitMQ would keep queueing; see engine.model.light)
    max_topic_buffer: int = 10_000
    #: bytes of message bodies held in queues (ready + unacked, counted per queue) above which the
    #: memory alarm goes on, as RabbitMQ's vm_memory_high_watermark: connections that publish are
    #: blocked (AMQP connection.blocked, reading paused) until it drops back to or below; 0 = off.
    #: The engine's own byte count, not the process RSS, so the broker stays deterministic.
    memory_high_watermark: int = 1024 * 1024 * 1024
    #: milliseconds an AMQP delivery may stay unacknowledged before its channel is closed with
    #: 406 and its deliveries requeued (RabbitMQ's consumer_timeout); 0 = off
    consumer_timeout: int = 30 * 60 * 1000
    #: ready messages a queue keeps in memory; later arrivals wait in the store's page (in the
    #: segment files with the embedded store) and are read back in order as the window drains
    queue_window: int = 2048
    #: and at most this many body bytes of them (at least one message): large bodies are paged too
    queue_window_bytes: int = 64 * 1024 * 1024
    #: credit flow (RabbitMQ's credit_flow_default_credit): a publisher is not read while a queue
    #: it published to holds this many ready messages its consumers have not taken yet, and is read
    #: again once that queue is down to half (or has no consumer left); 0 = off
    flow_credit: int = 400
    #: SO_RCVBUF (bytes) of accepted connections, as RabbitMQ's tcp_listen_options.recbuf: bounds
    #: what a publisher paused by credit flow leaves in our socket buffer (Linux autotunes it to
    #: several MB on loopback). Caps one connection's inbound rate at about this many bytes per
    #: round trip (256 KiB per 10 ms = 25 MB/s); 0 = the kernel's autotuning
    tcp_recv_buffer: int = 256 * 1024


@dataclass(slots=True)
class Cluster:
    """``[cluster]`` in the config file (``--node``, ``--cluster-address``, ``--cluster-lease`` override):
    this broker is node ``node`` of the cluster of every node sharing its PostgreSQL store."""

    #: the node's name, unique in the cluster; None: not a cluster node
    node: str | None = None
    #: HOST:PORT of the node-to-node link listener, advertised to the other nodes (default 127.0.0.1:25672)
    address: str | None = None
    #: seconds a node's leases outlive its last heartbeat (then other nodes take its queues over)
    lease: float = 5.0
    #: PEM certificate (may hold the key too) this node presents on the node-to-node link, as
    #: server and as client: mutual TLS on the link (needs ``tls_ca``)
    tls_cert: str | None = None
    #: PEM private key of ``tls_cert`` (when not in that file)
    tls_key: str | None = None
    #: PEM CA bundle the other nodes' link certificates must be signed by
    tls_ca: str | None = None


@dataclass(slots=True)
class Tls:
    """TLS for the listeners (``[tls]`` in the config file; ``--tls-*`` override): PEM files."""

    cert: str | None = None
    key: str | None = None
    #: CA bundle to verify client certificates with
    ca: str | None = None
    #: require a client certificate signed by ``ca`` (RabbitMQ's verify_peer + fail_if_no_peer_cert)
    verify_peer: bool = False


@dataclass(slots=True)
class WebSocket:
    """The WebSocket listener's handshake policy (``[websocket]`` in the config file)."""

    #: the ``Origin``s a browser page may connect from (exact, e.g. ``https://app.example.com``);
    #: any other is refused with 403. Empty: any origin. A request without ``Origin`` (not a
    #: browser) is not affected.
    allowed_origins: tuple[str, ...] = ()
    #: accept permessage-deflate when offered (RabbitMQ's ``web_stomp.ws_opts.compress``, off by default)
    compress: bool = False


@dataclass(slots=True)
class Config:
    users: dict[str, User] = field(
        default_factory=lambda: {"guest": User("guest", "guest", loopback_only=True, tags=("administrator",))}
    )
    vhosts: tuple[str, ...] = ("/",)
    default_vhost: str = "/"
    limits: Limits = field(default_factory=Limits)
    #: STOMP connections with no ``login`` header log in as this user with ``anonymous_password``
    #: (RabbitMQ's STOMP ``default_user``/``default_pass``): the normal login, password and
    #: loopback checks included. None (the default) refuses them.
    anonymous_user: str | None = None
    #: the password ``anonymous_user`` logs in with (required with it; never blank)
    anonymous_password: str = ""
    #: management HTTP API / Prometheus listeners as HOST:PORT ('' = off; None = the CLI's default)
    http: str | None = None
    prometheus: str | None = None
    #: the same two over TLS (``[tls]``'s certificate), HOST:PORT; off when None
    https: str | None = None
    #: Prometheus over TLS, HOST:PORT; off when None
    prometheus_https: str | None = None
    #: a definitions file (RabbitMQ's JSON) imported at every start (``--definitions`` overrides)
    definitions: str | None = None
    tls: Tls = field(default_factory=Tls)
    websocket: WebSocket = field(default_factory=WebSocket)
    cluster: Cluster = field(default_factory=Cluster)
    #: vhosts whose traffic goes to their firehose, the amq.rabbitmq.trace exchange
    trace_vhosts: tuple[str, ...] = ()
    #: the vhost holding the event exchange amq.rabbitmq.event (the events of every vhost); None: off
    event_vhost: str | None = None
    #: free bytes on the data directory's disk below which publishers are blocked (RabbitMQ's
    #: disk_free_limit, 50 MB by default); 0 = no disk alarm. ``disk_free_limit_relative``, when
    #: set, replaces it with that multiple of the machine's memory (resolved by the server at start)
    disk_free_limit: int = 50_000_000
    disk_free_limit_relative: float | None = None
    # reading one from a TOML file, validated: engine.config_schema.load / from_mapping
