"""Random (often invalid) client input never breaks the broker: no exception escapes session code
(the strict SimNetwork re-raises any), and a bystander connection keeps working."""

from enginetest_helpers import bodies, connected, new_net, send, subscribe
from hypothesis import given, settings
from hypothesis import strategies as st

COMMANDS = ["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT", "DISCONNECT", "CONNECT"]
HEADER_VALUES = {
    "destination": ["/queue/a", "/topic/t.*", "/topic/x*", "/exchange/amq.fanout", "/exchange/none/k",
                    "/amq/queue/a", "/temp-queue/r", "/reply-queue/zz", "/control/count-msgs/queue/a", "/bad", ""],
    "id": ["1", "2", "T_1@@1", "T_1@@2", "T_2@@3", "x"],
    "message-id": ["T_1@@1", "T_1@@4", "junk"],
    "ack": ["auto", "client", "client-individual", "bogus"],
    "transaction": ["tx", "ty"],
    "receipt": ["r"],
    "durable": ["true", "false"],
    "prefetch-count": ["0", "1", "-5", "abc"],
    "priority": ["0", "9", "99", "-1", "x"],
    "ttl": ["0", "10", "nan", "-1"],
    "expires": ["0", "1e30", "zz"],
    "ack-timeout": ["0.001", "-1", "inf"],
    "persistent": ["true"],
    "reply-to": ["/temp-queue/r", "/queue/a"],
    "requeue": ["false", "true"],
    "x-max-length": ["1", "x"],
    "x-message-ttl": ["5", "oops"],
    "x-dead-letter-exchange": ["", "amq.fanout", "missing"],
}

frame_st = st.tuples(
    st.sampled_from(COMMANDS),
    st.dictionaries(st.sampled_from(sorted(HEADER_VALUES)), st.integers(0, 10), max_size=5),
    st.binary(max_size=8),
)


def encode(command, header_picks, body):
    lines = [command]
    for name, i in header_picks.items():
        values = HEADER_VALUES[name]
        lines.append(f"{name}:{values[i % len(values)]}")
    return ("\n".join(lines) + "\n\n").encode() + body.replace(b"\x00", b"") + b"\x00"


@settings(max_examples=100, deadline=None)
@given(frames=st.lists(frame_st, max_size=12), garbage=st.binary(max_size=40), advance=st.floats(0, 3))
def test_random_frames_never_break_the_broker(frames, garbage, advance):
    net = new_net(max_chunk=16)
    bystander = connected(net)
    subscribe(bystander, "/queue/safe", "s")
    fuzzer = connected(net)
    net.run_until_idle()
    fuzzer.send_raw(b"".join(encode(*f) for f in frames) + garbage)
    net.run_until_idle()
    net.advance(advance)
    fuzzer.drop()
    net.run_until_idle()
    p = connected(net)
    send(p, "/queue/safe", b"ok")
    net.run_until_idle()
    assert bodies(bystander) == [b"ok"]
    assert net.broker.internal_errors == []
