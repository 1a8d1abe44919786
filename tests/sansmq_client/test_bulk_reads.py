"""``sansmq_client.bulk`` on a real broker: a stream range read into columns (no object per message),
batches published with confirms (mandatory: a return fails the batch), and the connection usable
for ordinary calls before, between and after; plus amqps:// on every front end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clientkit import ASYNC, Broker, name, run_async

import sansmq_client.sync
from amqpproto import spec
from sansmq_client import ChannelClosed, Unroutable
from sansmq_client.bulk import publish_batch, read_stream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from tlskit import make_pki, start_tls_server  # noqa: E402


def _props(i: int) -> bytes:
    return spec.encode_properties(spec.BasicProperties(
        content_type="text/plain" if i % 2 else None, delivery_mode=2, headers={"n": i, "kind": "test"}))


def _filled(conn: sansmq_client.sync.Connection, rows: int) -> str:
    stream = name("stream")
    conn.declare_queue(stream, durable=True, arguments={"x-queue-type": "stream"})
    # several routing keys and bodies over frame_max (131,072): each publish's frames are packed by the batch
    publish_batch(conn, "", [(stream, _props(i), b"%d:" % i + b"x" * (i * 997 % 140_000)) for i in range(rows)],
                  window=64)
    return stream


def test_a_range_read_in_bulk_is_the_published_messages_in_batches(broker: Broker) -> None:
    with sansmq_client.sync.connect(broker.url("amqp")) as conn:
        stream = _filled(conn, 300)
        batches = list(read_stream(conn, stream, 25, 280, prefetch=20, batch_rows=40))
        assert [len(b) for b in batches] == [40] * 6 + [15]
        offsets = [o for b in batches for o in b.offset]
        assert offsets == list(range(25, 280))
        bodies = [x for b in batches for x in b.body]
        assert bodies == [b"%d:" % i + b"x" * (i * 997 % 140_000) for i in range(25, 280)]
        cts = [x for b in batches for x in b.content_type]
        assert cts == ["text/plain" if i % 2 else None for i in range(25, 280)]
        first = batches[0]
        row = dict(zip(first.header_keys[first.header_offsets[0]:first.header_offsets[1]],
                       first.header_values[first.header_offsets[0]:first.header_offsets[1]], strict=True))
        assert row == {"x-stream-offset": "25", "n": "25", "kind": "test"}
        # the range's consumer is gone and its channel settled: the same connection reads again, and
        # ordinary calls work between and after
        assert [o for b in read_stream(conn, stream, 290, 300) for o in b.offset] == list(range(290, 300))
        conn.publish(stream, b"ordinary")
        assert [bytes(b.body[0]) for b in read_stream(conn, stream, 300, 301)] == [b"ordinary"]
        conn.delete_queue(stream)


def test_a_missing_stream_and_a_short_one_raise_and_the_connection_goes_on(broker: Broker) -> None:
    with sansmq_client.sync.connect(broker.url("amqp")) as conn:
        with pytest.raises(ChannelClosed) as e:
            list(read_stream(conn, name("none"), 0, 5))
        assert e.value.reply_code == 404 and e.value.method == "basic.consume"
        stream = _filled(conn, 3)
        with pytest.raises(TimeoutError, match="no message after offset 2 within 0.5s while reading up to 5"):
            list(read_stream(conn, stream, 0, 5, timeout=0.5))
        assert [o for b in read_stream(conn, stream, 1, 3) for o in b.offset] == [1, 2]
        conn.delete_queue(stream)


def test_a_read_stopped_early_cancels_its_consumer_and_the_connection_goes_on(broker: Broker) -> None:
    with sansmq_client.sync.connect(broker.url("amqp")) as conn:
        stream = _filled(conn, 50)
        early = read_stream(conn, stream, 0, 50, prefetch=5, batch_rows=10)
        assert list(next(early).offset) == list(range(10))
        early.close()  # e.g. Spark stopped the task
        assert not conn._core.consumers  # nothing left to restore or to pile deliveries up for
        conn.publish(stream, b"after")
        assert [len(b) for b in read_stream(conn, stream, 0, 51, batch_rows=100)] == [51]
        conn.delete_queue(stream)


def test_an_unroutable_mandatory_publish_fails_its_batch(broker: Broker) -> None:
    with sansmq_client.sync.connect(broker.url("amqp")) as conn:
        stream = _filled(conn, 0)
        conn.bind_queue(stream, "amq.direct", "routed")
        ok = [("routed", _props(i), b"ok") for i in range(10)]
        with pytest.raises(Unroutable, match="312 NO_ROUTE \\(exchange 'amq.direct', routing key 'nowhere'\\)") as e:
            publish_batch(conn, "amq.direct", [*ok, ("nowhere", _props(10), b"lost")], window=4)
        # the leading messages confirmed: at most the ten before it (a multiple confirm does not say which
        # publish was returned, so every write it settles fails), at least those of the writes before
        assert 8 <= e.value.confirmed <= 10  # type: ignore[attr-defined]
        publish_batch(conn, "amq.direct", ok, window=4)  # the publishing channel goes on
        assert sum(len(b) for b in read_stream(conn, stream, 0, 20)) == 20
        conn.delete_queue(stream)


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("tls")
    pki = make_pki(tmp / "pki")
    srv = start_tls_server("threads", pki, tmp)
    try:
        yield srv, pki
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def _tls_url(srv, pki, protocol: str = "amqps", hosts: str = "") -> str:  # type: ignore[no-untyped-def]
    return (f"{protocol}://guest:guest@{hosts}localhost:{srv.port(protocol)}/?cacertfile={pki.ca}"
            f"&certfile={pki.client_cert}&keyfile={pki.client_key}")


@pytest.mark.parametrize("protocol", ["amqps", "stomps"])
def test_the_sync_client_speaks_tls_with_a_client_certificate(tls_broker, protocol: str) -> None:  # type: ignore[no-untyped-def]
    srv, pki = tls_broker
    queue = name("tls")
    # the first host refuses (nothing listens on port 1): the next one is tried
    with sansmq_client.sync.connect(_tls_url(srv, pki, protocol, "127.0.0.1:1,")) as conn:
        if protocol == "amqps":
            conn.declare_queue(queue, durable=True, arguments={"x-queue-type": "stream"})
            publish_batch(conn, "", [(queue, _props(i), b"secret %d" % i) for i in range(500)])
            assert [x for b in read_stream(conn, queue, 0, 500, batch_rows=100) for x in b.body] == [
                b"secret %d" % i for i in range(500)]
            conn.delete_queue(queue)
        else:
            sub = conn.subscribe(f"/queue/{queue}")
            conn.publish(f"/queue/{queue}", b"secret")
            got = next(iter(sub))
            assert got.body == b"secret"
            conn.ack(got)


@pytest.mark.parametrize("kind", ASYNC)
def test_the_async_clients_speak_tls(tls_broker, kind: str) -> None:  # type: ignore[no-untyped-def]
    srv, pki = tls_broker

    async def scenario(io):  # type: ignore[no-untyped-def]
        conn = await io.client.connect(_tls_url(srv, pki))
        queue = await conn.declare_queue("", exclusive=True)
        await conn.publish(queue, b"over tls")
        sub = await conn.subscribe(queue)
        async for d in sub:
            await conn.ack(d)
            await conn.close()
            return d.body
    assert run_async(kind, scenario) == b"over tls"


def test_a_certificate_the_client_cannot_verify_fails_the_connect(tls_broker) -> None:  # type: ignore[no-untyped-def]
    srv, _ = tls_broker
    with pytest.raises(sansmq_client.ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
        sansmq_client.sync.connect(f"amqps://guest:guest@localhost:{srv.port('amqps')}/")


def test_a_read_the_broker_ends_at_its_end_offset_stops_at_the_cancel() -> None:
    """A filtered read cannot tell its end from the offsets it gets: with sansmq's x-stream-end-offset the
    broker cancels the consumer at the range's end, and that cancel (not an error then) ends the read."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
    from stream_standin import FakeStreamBroker

    messages = [("k", spec.BasicProperties(headers={"x-stream-filter-value": "eu" if i % 3 else "us"}), b"%d" % i)
                for i in range(30)]
    standin = FakeStreamBroker(messages).start()
    try:
        with sansmq_client.sync.connect(standin.url) as conn:
            got = [o for b in read_stream(conn, "s", 2, 20, batch_rows=4, timeout=5,
                                          arguments={"x-stream-filter": ["us"], "x-stream-end-offset": 20})
                   for o in b.offset]
            assert got == [3, 6, 9, 12, 15, 18]
            # the connection reads on: the same range unfiltered ends at its last offset as usual
            assert [o for b in read_stream(conn, "s", 2, 20, timeout=5) for o in b.offset] == list(range(2, 20))
    finally:
        standin.close()
