from __future__ import annotations

import pytest

from servers.cli import build_parser, parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:61613", ("127.0.0.1", 61613)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost", ("localhost", 1234)),
        (":5000", ("127.0.0.1", 5000)),
        ("[::1]:61613", ("::1", 61613)),
        ("[::]", ("::", 1234)),
        ("::1", ("::1", 1234)),  # a bare IPv6 literal is a host
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text, 1234) == expected


@pytest.mark.parametrize("text", ["host:port", "h:70000", "[::1", "[::1]x", "h:-1", "h:"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text, 1234)


def test_parser_defaults_and_disable() -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.server, args.stomp, args.config, args.log_level) == (
        "threads",
        "127.0.0.1:61613",
        None,
        "info",
    )
    assert build_parser().parse_args(["serve"]).ws == "127.0.0.1:15674"  # Web-STOMP's port
    assert build_parser().parse_args(["serve", "--ws", ":15674"]).ws == ":15674"
    assert build_parser().parse_args(["serve"]).amqp == "127.0.0.1:5672"
    assert build_parser().parse_args(["serve", "--no-amqp"]).amqp == ""
    assert build_parser().parse_args(["serve", "--no-stomp"]).stomp == ""
    assert build_parser().parse_args(["serve", "--stomp", ""]).stomp == ""
    args = build_parser().parse_args(["serve", "--server", "trio", "--log-level", "DEBUG"])
    assert (args.server, args.log_level) == ("trio", "debug")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--server", "gevent"])


def test_flow_options_override_the_config_limits(tmp_path) -> None:
    from servers.cli import _load_config

    path = tmp_path / "c.toml"
    path.write_text("[limits]\nflow_credit = 100\ntcp_recv_buffer = 131072\n")
    args = build_parser().parse_args(["serve", "--config", str(path)])
    limits = _load_config(args).limits
    assert (limits.flow_credit, limits.tcp_recv_buffer) == (100, 131072)
    args = build_parser().parse_args(["serve", "--config", str(path), "--flow-credit", "0",
                                      "--tcp-recv-buffer", "64KiB"])
    limits = _load_config(args).limits
    assert (limits.flow_credit, limits.tcp_recv_buffer) == (0, 65536)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--flow-credit", "-1"])

