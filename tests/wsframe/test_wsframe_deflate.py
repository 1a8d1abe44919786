"""permessage-deflate (RFC 7692): negotiation, interop with wsproto, the bomb limit."""
import os
import zlib

import pytest
import wsproto
import wsproto.events as wpe
from wsframe_helpers import chunkings, drain, frame, normalise
from wsproto.extensions import PerMessageDeflate as WPDeflate

from wsframe import (
    CLIENT,
    SERVER,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Connection,
    PerMessageDeflate,
    Request,
    TextMessage,
)
from wsframe._deflate import client_accept, client_offer, server_negotiate

PARAMS = [
    {},
    {"client_no_context_takeover": True},
    {"server_no_context_takeover": True},
    {"client_no_context_takeover": True, "server_no_context_takeover": True},
    {"client_max_window_bits": 9, "server_max_window_bits": 10},
    {"server_max_window_bits": 9, "client_max_window_bits": 12},
]
MESSAGES = [
    TextMessage("hello " * 200),
    TextMessage("hello " * 200),  # same again: context takeover makes it tiny
    BytesMessage(os.urandom(3000)),  # incompressible
    TextMessage(""),
    BytesMessage(b"\x00" * 70_000),
    TextMessage("ünïcödé ☃ " * 50),
]


def to_wp(ev):
    return wpe.TextMessage(ev.data) if isinstance(ev, TextMessage) else wpe.BytesMessage(ev.data)


def wsproto_server_pair(params, our=None):
    ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    cli = Connection(CLIENT, permessage_deflate=PerMessageDeflate(**(our or {})))
    ws.receive_data(cli.send(Request(host="h", path="/ws")))
    (req,) = list(ws.events())
    ext = WPDeflate(**params)
    (accepted,) = drain(cli, [ws.send(wpe.AcceptConnection(extensions=[ext]))])
    assert isinstance(accepted, AcceptConnection)
    return ws, cli, req


def wsproto_client_pair(params, ours=None):
    wc = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    srv = Connection(SERVER, permessage_deflate=PerMessageDeflate(**(ours or {})))
    ext = WPDeflate(**params)
    (req,) = drain(srv, [wc.send(wpe.Request(host="h", target="/ws", extensions=[ext]))])
    wc.receive_data(srv.send(AcceptConnection()))
    (accepted,) = list(wc.events())
    assert isinstance(accepted, wpe.AcceptConnection)
    return wc, srv, accepted


@pytest.mark.parametrize("params", PARAMS)
def test_wsframe_server_with_wsproto_client(params):
    wc, srv, accepted = wsproto_client_pair(params)
    assert accepted.extensions and srv.extension is not None
    assert srv.extension.client_no_context_takeover == params.get("client_no_context_takeover", False)
    assert srv.extension.server_no_context_takeover == params.get("server_no_context_takeover", False)
    assert srv.extension.server_max_window_bits == params.get("server_max_window_bits", 15)
    wire = b"".join(wc.send(to_wp(m)) for m in MESSAGES)
    assert wire[0] & 0x40  # RSV1: really compressed
    for chunks in chunkings(wire):
        _, srv2, _ = wsproto_client_pair(params)
        assert drain(srv2, chunks) == MESSAGES
    # and back: the wsproto client inflates what we deflate
    out = b"".join(srv.send(m) for m in MESSAGES)
    wc.receive_data(out)
    assert normalise(list(wc.events())) == normalise(MESSAGES)


@pytest.mark.parametrize("params", PARAMS)
def test_wsframe_client_with_wsproto_server(params):
    ws, cli, req = wsproto_server_pair(params)
    assert cli.extension is not None
    out = b"".join(cli.send(m) for m in MESSAGES)
    ws.receive_data(out)
    assert normalise(list(ws.events())) == normalise(MESSAGES)
    wire = b"".join(ws.send(to_wp(m)) for m in MESSAGES)
    assert drain(cli, chunkings(wire)[2]) == MESSAGES


def test_compressed_fragments_both_ways():
    wc, srv, _ = wsproto_client_pair({})
    wire = wc.send(wpe.TextMessage("abc" * 100, message_finished=False)) + wc.send(wpe.Ping(b"!"))
    wire += wc.send(wpe.TextMessage("def" * 100))
    assert normalise(drain(srv, [wire])) == [("ping", b"!"), ("text", "abc" * 100 + "def" * 100)]
    out = srv.send(BytesMessage(b"x" * 500, message_finished=False)) + srv.send(BytesMessage(b"y" * 500))
    assert out[0] == 0x42 and out[0] & 0x40  # first fragment: RSV1, not FIN
    wc.receive_data(out)
    assert normalise(list(wc.events())) == [("bytes", b"x" * 500 + b"y" * 500)]


def test_context_takeover_shrinks_repeated_messages():
    srv_take = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate())
    srv_reset = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate(server_no_context_takeover=True))
    msg = TextMessage("the same fairly long message body " * 4)
    first, second = srv_take.send(msg), srv_take.send(msg)
    assert len(second) < len(first)
    assert srv_reset.send(msg) == srv_reset.send(msg) == first


def test_window_bits_8_sends_uncompressed():
    # zlib cannot deflate with a 256-byte window, so that direction stays uncompressed
    cli = Connection(CLIENT, permessage_deflate=PerMessageDeflate())
    srv = Connection(SERVER, permessage_deflate=PerMessageDeflate(client_max_window_bits=8))
    drain(srv, [cli.send(Request(host="h", path="/"))])
    drain(cli, [srv.send(AcceptConnection())])
    assert cli.extension.client_max_window_bits == 8 == srv.extension.client_max_window_bits
    out = cli.send(TextMessage("zz" * 100))
    assert not out[0] & 0x40
    back = srv.send(TextMessage("zz" * 100))
    assert back[0] & 0x40
    assert drain(srv, [out]) == [TextMessage("zz" * 100)] == drain(cli, [back])


def test_decompression_bomb_is_capped():
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = raw.compress(b"\x00" * 50_000_000) + raw.flush(zlib.Z_SYNC_FLUSH)
    bomb = bomb[:-4]
    assert len(bomb) < 100_000
    srv = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate(), max_message_size=1 << 20)
    assert drain(srv, [frame(2, bomb, rsv=4)]) == [("error", 1009)]
    # exactly at the limit is fine
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    fits = (raw.compress(b"\x00" * (1 << 20)) + raw.flush(zlib.Z_SYNC_FLUSH))[:-4]
    srv = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate(), max_message_size=1 << 20)
    assert drain(srv, [frame(2, fits, rsv=4)]) == [BytesMessage(b"\x00" * (1 << 20))]


@pytest.mark.parametrize(
    "data,code",
    [
        (frame(2, b"\xff\xff\xff\xff", rsv=4), 1007),  # not deflate data
        (frame(2, b"ab", fin=False, rsv=4) + frame(0, b"cd", rsv=4), 1002),  # RSV1 on a continuation
        (frame(9, b"", rsv=4), 1002),  # RSV1 on a control frame
        (frame(1, b"x", rsv=2), 1002),  # RSV2 is never negotiated
    ],
)
def test_bad_compressed_input(data, code):
    srv = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate())
    assert drain(srv, [data])[-1] == ("error", code)


def test_rsv1_without_negotiation_is_a_protocol_error():
    wc = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    srv = Connection(SERVER, permessage_deflate=None)
    (req,) = drain(srv, [wc.send(wpe.Request(host="h", target="/", extensions=[WPDeflate()]))])
    assert req.extensions  # offered, but we are configured without it
    wc.receive_data(srv.send(AcceptConnection()))
    (acc,) = list(wc.events())
    assert acc.extensions == [] and srv.extension is None
    srv2 = Connection(SERVER, handshake=False, permessage_deflate=None)
    assert drain(srv2, [frame(1, b"\x01\x02", rsv=4)]) == [("error", 1002)]


def test_server_can_decline_with_empty_extension_list():
    wc = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    srv = Connection(SERVER)
    drain(srv, [wc.send(wpe.Request(host="h", target="/", extensions=[WPDeflate()]))])
    out = srv.send(AcceptConnection(extensions=[]))
    assert b"extensions" not in out and srv.extension is None


@pytest.mark.parametrize(
    "offers,config,response",
    [
        (["permessage-deflate"], PerMessageDeflate(), "permessage-deflate"),
        (["permessage-deflate; client_max_window_bits"], PerMessageDeflate(), "permessage-deflate"),
        (["permessage-deflate; client_max_window_bits"], PerMessageDeflate(client_max_window_bits=10), "permessage-deflate; client_max_window_bits=10"),
        (["permessage-deflate"], PerMessageDeflate(client_max_window_bits=10), "permessage-deflate"),  # may not limit
        (["permessage-deflate; server_max_window_bits=12"], PerMessageDeflate(), "permessage-deflate; server_max_window_bits=12"),
        (["permessage-deflate; server_max_window_bits=12"], PerMessageDeflate(server_max_window_bits=10), "permessage-deflate; server_max_window_bits=10"),
        (["permessage-deflate"], PerMessageDeflate(server_no_context_takeover=True), "permessage-deflate; server_no_context_takeover"),
        (["permessage-deflate; client_no_context_takeover"], PerMessageDeflate(), "permessage-deflate; client_no_context_takeover"),
        # invalid offers are skipped, the next acceptable one wins
        (["permessage-deflate; server_max_window_bits=7", "permessage-deflate; foo", "permessage-deflate; server_max_window_bits"], PerMessageDeflate(), None),
        (["x-webkit-deflate-frame", "permessage-deflate; server_max_window_bits=16", "permessage-deflate; server_no_context_takeover"], PerMessageDeflate(), "permessage-deflate; server_no_context_takeover"),
        (["permessage-deflate; server_no_context_takeover; server_no_context_takeover"], PerMessageDeflate(), None),
        (['permessage-deflate; client_max_window_bits="9"'], PerMessageDeflate(), "permessage-deflate; client_max_window_bits=9"),
    ],
)
def test_server_negotiation(offers, config, response):
    result = server_negotiate(offers, config)
    assert (result[0] if result else None) == response


def test_client_offer_and_accept_round_trip():
    cfg = PerMessageDeflate(client_no_context_takeover=True, server_max_window_bits=12)
    offer = client_offer(cfg)
    assert offer == "permessage-deflate; client_no_context_takeover; server_max_window_bits=12; client_max_window_bits"
    item, agreed = server_negotiate([offer], PerMessageDeflate())
    assert client_accept([item], cfg) == agreed
    for bad in (["permessage-deflate; server_max_window_bits=13"], ["permessage-deflate", "permessage-deflate"], ["permessage-deflate; bogus"]):
        with pytest.raises(ValueError):
            client_accept(bad, cfg)


def test_close_is_never_compressed():
    srv = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate())
    assert srv.send(CloseConnection(1000)) == b"\x88\x02\x03\xe8"
