"""Deterministic simulation tools for testing code that runs on the broker.

``SimNetwork(broker, seed)`` connects client-role stompproto connections to a :class:`Broker` in
memory, with a clock only the test moves (``net.now``, ``net.advance(seconds)``). Bytes can be cut
into rng-chosen chunks in both directions, a client can stop reading (its bytes are never reported
sent, so back-pressure builds), close cleanly or drop. ``FakeStore`` is a store that needs syncing,
logs every operation, can fail a sync and can "crash" (keep only what was synced).

    net = SimNetwork(Broker(Config(), MemoryStore(), random.Random(1)), seed=1)
    alice = net.connect()
    alice.stomp_connect()
    alice.send(Subscribe({"destination": "/queue/a", "id": "1"}))
    net.run_until_idle()

The seeded simulator with faults (a broker on a simulated disk, generated clients, invariants,
shrinking) builds on this module: ``engine.sim`` (``SimWorld``, ``run_seed``, ``shrink``).

``net.connect_ws(path, subprotocols)`` does the same over protocol ``"ws"`` (STOMP over WebSocket):
a :class:`WsSimClient` runs the opening handshake and sends each STOMP frame as one message.
"""

from __future__ import annotations

import random
from typing import Any

import amqpproto
import wsframe
from stompproto import (
    CLIENT,
    NEED_DATA,
    Connect,
    Connected,
    Connection,
    Error,
    Event,
    Frame,
    Heartbeat,
    HeartbeatDue,
    RemoteProtocolError,
)

from ._actions import Close, PauseReading, ResumeReading, Sync, Write
from ._broker import Broker
from ._message import Message
from .store import BindingDef, ExchangeDef, MemoryStore, QueueDef, StoreError

__all__ = ["SimNetwork", "SimClient", "WsSimClient", "AmqpSimClient", "FakeStore"]

DEFAULT_START = 1_700_000_000.0


class FakeStore(MemoryStore):
    """A MemoryStore that (by default) needs sync, records every operation, and fails on demand.

    ``crash()`` returns the store a restarted broker would find: only operations covered by a
    successful ``sync`` survive.
    """

    def __init__(self, needs_sync: bool = True) -> None:
        super().__init__()
        self.needs_sync = needs_sync
        self.ops: list[tuple[str, tuple[Any, ...]]] = []
        self.synced_ops = 0
        self.sync_calls: list[int] = []
        self._fail_syncs = 0
        self._fail_writes = 0

    def fail_next_sync(self, count: int = 1) -> None:
        self._fail_syncs += count

    def fail_next_write(self, count: int = 1) -> None:
        """The next ``count`` entity/message operations raise StoreError (nothing recorded)."""
        self._fail_writes += count

    def _check_write(self, name: str) -> None:
        if self._fail_writes:
            self._fail_writes -= 1
            raise StoreError(f"injected write failure ({name})")

    def _log(self, name: str, *args: Any) -> None:
        self._check_write(name)
        self.ops.append((name, args))
        getattr(MemoryStore, name)(self, *args)

    def add_vhost(self, name: str) -> None:
        self._log("add_vhost", name)

    def delete_vhost(self, name: str) -> None:
        self._log("delete_vhost", name)

    def add_exchange(self, xdef: ExchangeDef) -> None:
        self._log("add_exchange", xdef)

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._log("delete_exchange", vhost, name)

    def add_queue(self, qdef: QueueDef) -> None:
        self._log("add_queue", qdef)

    def delete_queue(self, vhost: str, name: str) -> None:
        self._log("delete_queue", vhost, name)

    def add_binding(self, bdef: BindingDef) -> None:
        self._log("add_binding", bdef)

    def delete_binding(self, bdef: BindingDef) -> None:
        self._log("delete_binding", bdef)

    def enqueue(self, vhost: str, queue: str, msg: Message) -> None:
        self._log("enqueue", vhost, queue, msg)

    def enqueue_expiring(self, vhost: str, queue: str, msg: Message, expires: float) -> None:
        self._log("enqueue_expiring", vhost, queue, msg, expires)

    def remove(self, vhost: str, queue: str, msg_id: int) -> None:
        self._log("remove", vhost, queue, msg_id)

    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        self._log("update_delivery", vhost, queue, msg_id, delivery_count)

    def sync(self, token: int) -> None:
        self.sync_calls.append(token)
        if self._fail_syncs:
            self._fail_syncs -= 1
            raise StoreError(f"injected sync failure (token {token})")
        self.synced_ops = len(self.ops)
        self._stream_logs().commit()

    def _stream_logs(self) -> Any:
        logs = super()._stream_logs()
        logs.guard = self._check_write  # stream appends and offset tracking fail on demand too
        return logs

    def crash(self) -> FakeStore:
        survivor = FakeStore(self.needs_sync)
        streams = self._stream_logs().crashed(survivor._check_write)
        for name, args in self.ops[: self.synced_ops]:
            survivor._log(name, *args)
        survivor.synced_ops = len(survivor.ops)
        survivor.__dict__["_store_streams"] = streams
        return survivor


class SimClient:
    """A client-role STOMP connection living in a :class:`SimNetwork`."""

    def __init__(self, net: SimNetwork, conn_id: int, peer: tuple[Any, ...], reading: bool,
                 auto_heartbeat: bool) -> None:
        self.net = net
        self.conn_id = conn_id
        self.peer = peer
        self.conn = Connection(CLIENT)
        #: every event received, in order (stompproto's; amqpproto's for an ``AmqpSimClient``)
        self.received: list[Any] = []
        self._cursor = 0
        #: False: bytes from the broker pile up unread and are never reported sent
        self.reading = reading
        self.auto_heartbeat = auto_heartbeat
        #: a heartbeat came due while ``auto_heartbeat`` was off (``resume_heartbeat`` sends it)
        self.heartbeat_missed = False
        self.paused = False  # the broker asked the "server" to stop reading from us
        self.server_closed = False  # the broker closed the connection
        self.gone = False  # transport closed (either side)
        self.error: RemoteProtocolError | None = None
        self._to_broker = bytearray()
        self._from_broker = bytearray()

    def __repr__(self) -> str:
        return f"SimClient(conn_id={self.conn_id})"

    # -- sending ----------------------------------------------------------------------------------
    def send(self, event: Event) -> None:
        """Serialise ``event`` with the client codec; the bytes travel on ``run_until_idle``."""
        self.send_raw(self.conn.send(event, self.net.now))

    def send_raw(self, data: bytes) -> None:
        """Queue raw bytes (bypassing the client codec: for bad input)."""
        if not self.gone:
            self._to_broker += data

    def stomp_connect(self, headers: dict[str, str] | None = None, version: str = "1.2",
                      anonymous: bool = False) -> Frame:
        """Send CONNECT (as guest/guest unless ``headers`` log in otherwise, or with no login at all
        when ``anonymous``), run the network, return the CONNECTED (or ERROR) frame."""
        h = {"accept-version": version, "host": "/", "heart-beat": "0,0"}
        if not anonymous:
            h.update(login="guest", passcode="guest")
        h.update(headers or {})
        self.send(Connect(h))
        self.net.run_until_idle()
        for ev in self.received:
            if isinstance(ev, (Connected, Error)):
                return ev
        raise AssertionError("no CONNECTED or ERROR received")

    # -- receiving --------------------------------------------------------------------------------
    def events(self) -> list[Event]:
        """Events received since the last call (heart-beats included)."""
        new = self.received[self._cursor:]
        self._cursor = len(self.received)
        return new

    def frames(self, cls: type[Frame] | None = None) -> list[Frame]:
        """Every frame received so far, optionally of one class only (heart-beats excluded)."""
        return [e for e in self.received if isinstance(e, Frame) and (cls is None or isinstance(e, cls))]

    def start_reading(self) -> None:
        self.reading = True

    def stop_reading(self) -> None:
        self.reading = False

    @property
    def unread(self) -> int:
        return len(self._from_broker)

    # -- transport ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Clean close: EOF reaches the broker, then the transport goes."""
        if self.gone:
            return
        self.net._flush_client(self)
        self.gone = True
        self.net._deliver_eof(self)

    def drop(self) -> None:
        """Abrupt loss: the broker only learns ``connection_lost``."""
        if self.gone:
            return
        self.gone = True
        self._to_broker.clear()
        self.net._lost(self)

    # -- internals ---------------------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            self.conn.receive_data(data, self.net.now)
            self._read_events()
        except RemoteProtocolError as exc:
            self.error = exc

    def _read_events(self) -> None:
        while True:
            ev = self.conn.next_event()
            if ev is NEED_DATA:
                return
            if isinstance(ev, HeartbeatDue):
                if self.auto_heartbeat and not self.gone:
                    self.send(Heartbeat())
                else:
                    self.heartbeat_missed = True
                continue
            self.received.append(ev)

    def heartbeat_frame(self) -> Any:
        return Heartbeat()

    def resume_heartbeat(self) -> None:
        """Heart-beat again after a stall, as a client whose thread was blocked does on waking:
        a heartbeat that came due meanwhile goes out now."""
        self.auto_heartbeat = True
        if self.heartbeat_missed and not self.gone:
            self.heartbeat_missed = False
            self.send(self.heartbeat_frame())

    def _timer(self) -> float | None:
        if self.gone or self.error is not None:
            return None
        return self.conn.get_timer()

    def _fire(self, now: float) -> None:
        self.conn.handle_timer(now)
        try:
            self._read_events()
        except RemoteProtocolError as exc:
            self.error = exc


class SimNetwork:
    """An in-memory network and clock around one broker. Fully deterministic for a given seed."""

    def __init__(self, broker: Broker, seed: int = 0, *, start: float = DEFAULT_START,
                 max_chunk: int | None = None, auto_sync: bool = True, strict: bool = True) -> None:
        self.broker = broker
        #: re-raise exceptions the broker caught in session code (it closes the connection)
        self.strict = strict
        self.rng = random.Random(seed)
        self._now = start
        #: cut every transfer into rng-chosen chunks of 1..max_chunk bytes (None: whole)
        self.max_chunk = max_chunk
        #: run store.sync for every Sync action (False: tokens wait in ``pending_syncs``)
        self.auto_sync = auto_sync
        self.pending_syncs: list[int] = []
        self.clients: dict[int, SimClient] = {}
        #: every action the broker emitted, as comparable tuples (for determinism checks)
        self.log: list[tuple[Any, ...]] = []
        self._next_conn = 0

    @property
    def now(self) -> float:
        return self._now

    # -- connections ---------------------------------------------------------------------------------
    def connect(self, peer: tuple[Any, ...] | None = None, protocol: str = "stomp", *, reading: bool = True,
                auto_heartbeat: bool = True) -> SimClient:
        self._next_conn += 1
        conn_id = self._next_conn
        if peer is None:
            peer = ("127.0.0.1", 40000 + conn_id)
        cls = AmqpSimClient if protocol in ("amqp", "cluster") else SimClient  # "cluster": the node link
        client = cls(self, conn_id, peer, reading, auto_heartbeat)
        self.clients[conn_id] = client
        self.broker.connection_made(conn_id, protocol, peer, self._now)
        self._process(self.broker.drain())
        return client

    def connect_ws(self, path: str = "/ws", subprotocols: tuple[str, ...] = ("v12.stomp",), *,
                   peer: tuple[Any, ...] | None = None, reading: bool = True, auto_heartbeat: bool = True,
                   deflate: bool = False, origin: str | None = None) -> WsSimClient:
        """Connect over protocol ``"ws"`` and run the opening handshake (see ``client.accepted``)."""
        self._next_conn += 1
        conn_id = self._next_conn
        if peer is None:
            peer = ("127.0.0.1", 40000 + conn_id)
        client = WsSimClient(self, conn_id, peer, reading, auto_heartbeat, deflate)
        self.clients[conn_id] = client
        self.broker.connection_made(conn_id, "ws", peer, self._now)
        self._process(self.broker.drain())
        client.send_ws(wsframe.Request(host="localhost", path=path, subprotocols=list(subprotocols), origin=origin))
        self.run_until_idle()
        return client

    # -- running -------------------------------------------------------------------------------------
    def run_until_idle(self, max_rounds: int = 100_000) -> None:
        """Move bytes both ways and complete syncs until nothing moves (time does not advance)."""
        for _ in range(max_rounds):
            moved = False
            for client in list(self.clients.values()):
                if client._to_broker and not client.gone and not client.paused and not client.server_closed:
                    self._flush_client(client)
                    moved = True
                if client._from_broker and client.reading:
                    self._read(client)
                    moved = True
            actions = self.broker.drain()
            if actions:
                self._process(actions)
                moved = True
            if not moved:
                return
        raise RuntimeError("network did not become idle")

    def advance(self, seconds: float) -> None:
        """Move the clock forward, firing broker and client timers in deadline order."""
        target = self._now + seconds
        self.run_until_idle()
        while True:
            due = self.broker.get_timer()
            for client in self.clients.values():
                t = client._timer()
                if t is not None and (due is None or t < due):
                    due = t
            if due is None or due > target:
                break
            self._now = max(self._now, due)
            if (bt := self.broker.get_timer()) is not None and bt <= self._now:
                self.broker.handle_timer(self._now)
            for client in list(self.clients.values()):
                t = client._timer()
                if t is not None and t <= self._now:
                    client._fire(self._now)
            self.run_until_idle()
        self._now = target
        self.run_until_idle()

    def complete_syncs(self) -> None:
        """Run the store's sync for every pending token (when ``auto_sync`` is off)."""
        pending, self.pending_syncs = self.pending_syncs, []
        for token in pending:
            self._sync(token)
        self.run_until_idle()

    # -- internals ---------------------------------------------------------------------------------
    def _chunks(self, data: bytes) -> list[bytes]:
        if self.max_chunk is None or len(data) <= 1:
            return [data]
        out, i = [], 0
        while i < len(data):
            n = self.rng.randint(1, self.max_chunk)
            out.append(data[i:i + n])
            i += n
        return out

    def _flush_client(self, client: SimClient) -> None:
        data = bytes(client._to_broker)
        client._to_broker.clear()
        offset = 0
        for chunk in self._chunks(data):
            if client.server_closed or client.gone:
                return
            if client.paused:
                client._to_broker[:0] = data[offset:]  # the rest waits for ResumeReading
                return
            offset += len(chunk)
            self.broker.data_received(client.conn_id, chunk, self._now)
            self._process(self.broker.drain())

    def _read(self, client: SimClient) -> None:
        data = bytes(client._from_broker)
        client._from_broker.clear()
        for chunk in self._chunks(data):
            client._feed(chunk)
            if not client.gone:
                self.broker.data_sent(client.conn_id, len(chunk))
        if client.server_closed and not client.gone:
            client.gone = True
            self._lost(client)

    def _deliver_eof(self, client: SimClient) -> None:
        if not client.server_closed:
            self.broker.data_received(client.conn_id, b"", self._now)
            self._process(self.broker.drain())
        self._lost(client)

    def _lost(self, client: SimClient) -> None:
        self.broker.connection_lost(client.conn_id, self._now)
        self._process(self.broker.drain())

    def _sync(self, token: int) -> None:
        try:
            self.broker.run_sync(token)
        except StoreError:
            self.broker.sync_failed(token, self._now)
        else:
            self.broker.synced(token, self._now)
        self._process(self.broker.drain())

    def _process(self, actions: list[Any]) -> None:
        if self.strict and self.broker.internal_errors:
            raise self.broker.internal_errors.pop(0)
        syncs: list[int] = []
        for action in actions:
            if isinstance(action, Write):
                self.log.append(("write", action.conn_id, action.data))
                client = self.clients.get(action.conn_id)
                if client is not None and not client.gone:
                    client._from_broker += action.data
            elif isinstance(action, Close):
                self.log.append(("close", action.conn_id))
                client = self.clients.get(action.conn_id)
                if client is not None:
                    client.server_closed = True
                    if client.reading and not client.gone:
                        self._read(client)
                    elif client.gone:
                        pass
            elif isinstance(action, PauseReading):
                self.log.append(("pause", action.conn_id))
                if (client := self.clients.get(action.conn_id)) is not None:
                    client.paused = True
            elif isinstance(action, ResumeReading):
                self.log.append(("resume", action.conn_id))
                if (client := self.clients.get(action.conn_id)) is not None:
                    client.paused = False
            elif isinstance(action, Sync):
                self.log.append(("sync", action.token))
                syncs.append(action.token)
        for token in syncs:
            if self.auto_sync:
                self._sync(token)
            else:
                self.pending_syncs.append(token)


class WsSimClient(SimClient):
    """A STOMP client over a client-role WebSocket (made by ``SimNetwork.connect_ws``).

    ``send(frame)`` sends each STOMP frame as one text message (binary when not UTF-8);
    ``send_message(payload)`` sends arbitrary STOMP bytes as one message (split or merged frames),
    ``send_ws(event)`` any WebSocket event. Every WebSocket event received is in ``ws_events``;
    message payloads also feed the client's STOMP codec (``received``). Pings are answered, and a
    server Close is answered.
    """

    def __init__(self, net: SimNetwork, conn_id: int, peer: tuple[Any, ...], reading: bool,
                 auto_heartbeat: bool, deflate: bool) -> None:
        super().__init__(net, conn_id, peer, reading, auto_heartbeat)
        self.ws = wsframe.Connection(
            wsframe.CLIENT, rng=net.rng.randbytes,
            permessage_deflate=wsframe.PerMessageDeflate() if deflate else None,
        )
        self.ws_events: list[wsframe.Event] = []
        self.ws_error: wsframe.RemoteProtocolError | None = None
        #: answer the server's Close (as browsers do); False simulates a client that never answers
        self.answer_close = True

    def __repr__(self) -> str:
        return f"WsSimClient(conn_id={self.conn_id})"

    def _first(self, cls: type) -> Any:
        return next((e for e in self.ws_events if isinstance(e, cls)), None)

    @property
    def accepted(self) -> wsframe.AcceptConnection | None:
        return self._first(wsframe.AcceptConnection)

    @property
    def rejected(self) -> wsframe.RejectConnection | None:
        return self._first(wsframe.RejectConnection)

    @property
    def close_frame(self) -> wsframe.CloseConnection | None:
        """The server's Close frame, if one arrived."""
        return self._first(wsframe.CloseConnection)

    def data_messages(self) -> list[wsframe.TextMessage | wsframe.BytesMessage]:
        return [e for e in self.ws_events if isinstance(e, (wsframe.TextMessage, wsframe.BytesMessage))]

    # -- sending ----------------------------------------------------------------------------------
    def send(self, event: Event) -> None:
        self.send_message(self.conn.send(event, self.net.now))

    def send_message(self, payload: bytes, binary: bool = False) -> None:
        if binary:
            self.send_ws(wsframe.BytesMessage(payload))
            return
        try:
            self.send_ws(wsframe.TextMessage(payload.decode("utf-8")))
        except UnicodeDecodeError:
            self.send_ws(wsframe.BytesMessage(payload))

    def send_ws(self, event: wsframe.Event) -> None:
        self.send_raw(self.ws.send(event))

    def ws_close(self, code: int = 1000) -> None:
        """Start the closing handshake (the transport stays until the server closes it)."""
        self.send_ws(wsframe.CloseConnection(code))

    # -- internals ---------------------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        if self.ws_error is not None:
            return
        ws = self.ws
        try:
            ws.receive_data(data)
            while (ev := ws.next_event()) is not wsframe.NEED_DATA:
                self.ws_events.append(ev)
                if isinstance(ev, (wsframe.TextMessage, wsframe.BytesMessage)):
                    payload = ev.data.encode("utf-8") if isinstance(ev, wsframe.TextMessage) else ev.data
                    super()._feed(payload)
                elif isinstance(ev, wsframe.Ping) and not self.gone:
                    self.send_ws(ev.response())
                elif (isinstance(ev, wsframe.CloseConnection) and self.answer_close
                      and ws.state is wsframe.ConnectionState.SERVER_CLOSING):
                    self.send_ws(ev.response())
        except wsframe.RemoteProtocolError as exc:
            self.ws_error = exc


class AmqpSimClient(SimClient):
    """A client-role amqpproto connection (made by ``SimNetwork.connect(protocol="amqp")``).

    ``amqp_open()`` runs the handshake (header, start-ok, tune-ok, open); ``open_channel(n)``
    opens a channel; ``call(method)`` sends a method and returns what the broker answered.
    ``received`` holds every amqpproto event (heart-beats answered automatically).
    """

    def heartbeat_frame(self) -> Any:
        return amqpproto.Heartbeat()

    def __init__(self, net: SimNetwork, conn_id: int, peer: tuple[Any, ...], reading: bool,
                 auto_heartbeat: bool) -> None:
        super().__init__(net, conn_id, peer, reading, auto_heartbeat)
        self.conn = amqpproto.Connection(amqpproto.CLIENT)  # type: ignore[assignment]
        self.amqp_error: amqpproto.RemoteProtocolError | None = None

    def __repr__(self) -> str:
        return f"AmqpSimClient(conn_id={self.conn_id})"

    def send(self, event: Any) -> None:
        """Serialise an amqpproto event with the client codec; the bytes travel on ``run_until_idle``."""
        self.send_raw(self.conn.send(event, self.net.now))

    def amqp_open(self, user: str = "guest", password: str = "guest", vhost: str = "/",
                  mechanism: str = "PLAIN", heartbeat: int = 0) -> Any:
        """Run the handshake; return the ConnectionOpenOk, or the ConnectionClose that refused us."""
        spec = amqpproto.spec
        self.conn.config_heartbeat = heartbeat  # type: ignore[attr-defined]
        self.send(amqpproto.ProtocolHeader())
        self.net.run_until_idle()
        start = self.last(spec.ConnectionStart)
        assert start is not None, self.received
        response = (amqpproto.plain_response(user, password) if mechanism == "PLAIN"
                    else amqpproto.amqplain_response(user, password))
        self.send(spec.ConnectionStartOk({"product": "sim", "capabilities": {
            "consumer_cancel_notify": True, "publisher_confirms": True, "basic.nack": True}},
            mechanism, response, "en_US"))
        self.net.run_until_idle()
        tune = self.last(spec.ConnectionTune)
        if tune is None:
            return self.last(spec.ConnectionClose)
        self.send(self.conn.tune_ok(tune))  # type: ignore[attr-defined]
        self.send(spec.ConnectionOpen(vhost))
        self.net.run_until_idle()
        return self.last(spec.ConnectionOpenOk) or self.last(spec.ConnectionClose)

    def open_channel(self, channel: int = 1) -> Any:
        return self.call(amqpproto.spec.ChannelOpen(channel=channel))

    def call(self, method: Any) -> Any:
        """Send ``method``, run the network, return the last event received meanwhile (or None)."""
        before = len(self.received)
        self.send(method)
        self.net.run_until_idle()
        new = self.received[before:]
        return new[-1] if new else None

    def last(self, cls: type) -> Any:
        return next((e for e in reversed(self.received) if isinstance(e, cls)), None)

    def of(self, cls: type, channel: int | None = None) -> list[Any]:
        """Every received event of ``cls`` (on ``channel`` if given)."""
        return [e for e in self.received if isinstance(e, cls)
                and (channel is None or getattr(e, "channel", None) == channel)]

    def _feed(self, data: bytes) -> None:
        if self.amqp_error is not None or not data:
            return
        try:
            self.conn.receive_data(data, self.net.now)
            self._read_events()
        except amqpproto.RemoteProtocolError as exc:
            self.amqp_error = exc

    def _read_events(self) -> None:
        while True:
            ev = self.conn.next_event()
            if ev is amqpproto.NEED_DATA:
                return
            if isinstance(ev, amqpproto.ConnectionClosed):
                return  # the codec reports EOF on every call from now on
            if isinstance(ev, amqpproto.HeartbeatDue):
                if self.auto_heartbeat and not self.gone:
                    self.send(self.heartbeat_frame())
                else:
                    self.heartbeat_missed = True
                continue
            if isinstance(ev, amqpproto.spec.ChannelClose) and not self.gone:
                self.send(amqpproto.spec.ChannelCloseOk(channel=ev.channel))
            elif isinstance(ev, amqpproto.spec.ConnectionClose) and not self.gone:
                self.send(amqpproto.spec.ConnectionCloseOk())
            self.received.append(ev)

    def _timer(self) -> float | None:
        if self.gone or self.amqp_error is not None:
            return None
        return self.conn.get_timer()

    def _fire(self, now: float) -> None:
        self.conn.handle_timer(now)
        try:
            self._read_events()
        except amqpproto.RemoteProtocolError as exc:
            self.amqp_error = exc
