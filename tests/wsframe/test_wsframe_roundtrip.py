"""Hypothesis round trips: what one wsframe role sends, the other parses back unchanged."""
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsframe_helpers import drain, random_chunks

from wsframe import (
    CLIENT,
    SERVER,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Connection,
    PerMessageDeflate,
    Ping,
    Pong,
    Request,
    TextMessage,
)

close_codes = st.sampled_from([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4321, 4999])
small = st.one_of(
    st.builds(TextMessage, st.text(max_size=300)),
    st.builds(BytesMessage, st.binary(max_size=300)),
    st.builds(Ping, st.binary(max_size=125)),
    st.builds(Pong, st.binary(max_size=125)),
)
# 64-bit length form; built from a seed because hypothesis draws big binaries slowly
large = st.builds(lambda seed, n: BytesMessage(random.Random(seed).randbytes(n)), st.integers(0, 2**32), st.integers(65536, 65600))
events = st.one_of(small, small, small, large)
deflate = st.one_of(
    st.none(),
    st.builds(
        PerMessageDeflate,
        server_no_context_takeover=st.booleans(),
        client_no_context_takeover=st.booleans(),
        server_max_window_bits=st.integers(9, 15),
        client_max_window_bits=st.integers(8, 15),
    ),
)


def open_pair(client_cfg, server_cfg, subprotocols=("v12.stomp",)):
    cli = Connection(CLIENT, permessage_deflate=client_cfg)
    srv = Connection(SERVER, permessage_deflate=server_cfg)
    (req,) = drain(srv, [cli.send(Request(host="example.com", path="/ws", subprotocols=list(subprotocols)))])
    (acc,) = drain(cli, [srv.send(AcceptConnection(subprotocol=req.subprotocols[0] if req.subprotocols else None))])
    assert isinstance(acc, AcceptConnection)
    assert cli.extension == srv.extension
    assert (cli.extension is None) == (client_cfg is None or server_cfg is None)
    return cli, srv


@given(client_cfg=deflate, server_cfg=deflate, msgs=st.lists(events, max_size=8), seed=st.integers(0, 1000))
def test_messages_round_trip_both_directions(client_cfg, server_cfg, msgs, seed):
    cli, srv = open_pair(client_cfg, server_cfg)
    up = b"".join(cli.send(m) for m in msgs)
    assert drain(srv, random_chunks(up, seed, 2000)) == msgs
    down = b"".join(srv.send(m) for m in msgs)
    assert drain(cli, random_chunks(down, seed, 2000)) == msgs


@given(
    pieces=st.lists(st.text(max_size=50), min_size=1, max_size=5),
    cfg=deflate,
    fragments=st.booleans(),
)
def test_fragmented_text_round_trip(pieces, cfg, fragments):
    cli, _ = open_pair(cfg, cfg)
    srv = Connection(SERVER, handshake=False, permessage_deflate=cli.extension, deliver_fragments=fragments)
    out = b"".join(cli.send(TextMessage(p, message_finished=i == len(pieces) - 1)) for i, p in enumerate(pieces))
    got = drain(srv, [out])
    assert "".join(e.data for e in got) == "".join(pieces)
    assert [e.message_finished for e in got] == ([False] * (len(pieces) - 1) + [True] if fragments else [True])


@given(code=close_codes, reason=st.text(max_size=30).filter(lambda r: len(r.encode()) <= 123))
@pytest.mark.parametrize("closer", [CLIENT, SERVER])
def test_close_round_trip(closer, code, reason):
    cli, srv = open_pair(None, None)
    a, b = (cli, srv) if closer is CLIENT else (srv, cli)
    (received,) = drain(b, [a.send(CloseConnection(code, reason))])
    assert received == CloseConnection(code, reason)
    (echo,) = drain(a, [b.send(received.response())])
    assert echo == CloseConnection(code, "")
    assert a.state.value == b.state.value == "closed"


@given(
    host=st.from_regex(r"[a-z][a-z0-9.-]{0,20}(:[0-9]{1,5})?", fullmatch=True),
    path=st.from_regex(r"/[A-Za-z0-9/._~?=&%-]{0,30}", fullmatch=True),
    protocols=st.lists(st.from_regex(r"[a-z0-9.]{1,10}", fullmatch=True), max_size=4, unique=True),
    origin=st.one_of(st.none(), st.from_regex(r"https?://[a-z]{1,10}\.example", fullmatch=True)),
)
def test_request_round_trip(host, path, protocols, origin):
    cli = Connection(CLIENT, permessage_deflate=None)
    srv = Connection(SERVER)
    (req,) = drain(srv, [cli.send(Request(host=host, path=path, subprotocols=protocols, origin=origin, headers=[(b"x-user", b"guest")]))])
    assert (req.host, req.path, req.subprotocols, req.origin, req.extensions) == (host, path, protocols, origin, [])
    assert (b"x-user", b"guest") in req.headers
