"""The README's examples run as written: the client example against a live server, the simulation
example in memory."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import servers

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_stompproto_client_example_runs_against_a_server() -> None:
    (code,) = [b for b in _python_blocks() if "socket.create_connection" in b]
    with servers.running("asyncio", [("stomp", "127.0.0.1", 0)]) as srv:
        host, port = srv.address("stomp")
        code = code.replace('("127.0.0.1", 61613)', f"({host!r}, {port})")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Connected(") and "'version': '1.2'" in lines[0]
    assert lines[-1] == "b'hello'"


def test_readme_simulation_example_redelivers_after_the_ack_timeout() -> None:
    (code,) = [b for b in _python_blocks() if "SimNetwork" in b]
    scope: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), scope)
    from stompproto import Message

    # it prints what the comments under the print say
    shown = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# b'")]
    assert out.getvalue().splitlines() == shown == ["b'job' false", "b'job' true"]

    received = [e for e in scope["consumer"].received if isinstance(e, Message)]  # type: ignore[attr-defined]
    assert [m.body for m in received] == [b"job", b"job"]
    assert received[1].headers.get("redelivered") == "true"
