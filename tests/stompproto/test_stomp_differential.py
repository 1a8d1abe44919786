"""Differential checks against stomp.py's own frame code (stomp.utils), STOMP 1.2."""

from __future__ import annotations

import stomp.utils as su
from hypothesis import given
from hypothesis import strategies as st
from stomp_helpers import client_at, feed, server_at

from stompproto import Message, Send

_text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1, max_size=12)
# stomp.py's regex splits at the first ':' and writes headers unescaped, so its frames
# only round-trip for names/values without ':', '\\' or line breaks.
_plain = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters=":\\"),
                 min_size=1, max_size=12)
_names = _plain.filter(lambda n: n not in ("content-length", "destination", "message-id", "subscription"))


@given(extra=st.dictionaries(_names, _text, max_size=5), body=st.binary(max_size=40).filter(lambda b: b"\x00" not in b))
def test_our_message_parsed_by_stomp_py(extra, body):
    frame = Message({"destination": "/a", "message-id": "1", "subscription": "0", **extra}, body)
    wire = server_at("1.2").send(frame)
    theirs = su.parse_frame(wire[:-1])  # stomp.py's transport strips the NUL
    assert theirs.cmd == "MESSAGE"
    expected = dict(frame.headers)
    if body:
        expected["content-length"] = str(len(body))
    assert theirs.headers == expected
    assert theirs.body == body


@given(extra=st.dictionaries(_names, _plain, max_size=5), body=st.binary(max_size=40).filter(lambda b: b"\x00" not in b))
def test_stomp_py_send_parsed_by_us(extra, body):
    headers = {"destination": "/queue/a", **extra}
    wire = b"".join(su.convert_frame(su.Frame("SEND", dict(headers), body)))
    events, err = feed(server_at("1.2"), wire)
    assert err is None
    assert events == [Send(headers, body)]


def test_client_frames_match_stomp_py_for_plain_headers():
    frame = Send({"destination": "/queue/a", "persistent": "true"}, b"hello")
    ours = client_at("1.2").send(frame)
    theirs = su.parse_frame(ours[:-1])
    assert (theirs.cmd, theirs.headers, theirs.body) == (
        "SEND", {"destination": "/queue/a", "persistent": "true", "content-length": "5"}, b"hello")
