"""The README's examples and the simulation page's run as written: the codec client and the broker
example against a live server, the simulation examples in memory."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import servers

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SIMULATION_PAGE = ROOT / "docs" / "simulation.md"


def _python_blocks(page: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


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


def test_readme_broker_example_runs_pika_against_a_server(tmp_path: Path) -> None:
    """The front page's "The broker" block: pika with confirms, a durable quorum queue, a persistent
    message published and fetched back, on the segment store (fsync honoured)."""
    (code,) = [b for b in _python_blocks() if "import pika" in b]
    broker = servers.make_broker(store=servers.make_store(str(tmp_path)))
    with servers.running("threads", [("amqp", "127.0.0.1", 0)], broker=broker) as srv:
        host, port = srv.address("amqp")
        assert "@127.0.0.1:5672/" in code
        code = code.replace("@127.0.0.1:5672/", f"@{host}:{port}/")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == ["b'order 1'"]


def test_simulation_page_example_redelivers_after_the_ack_timeout() -> None:
    (code,) = [b for b in _python_blocks(SIMULATION_PAGE) if "SimNetwork" in b]
    scope: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/simulation.md", "exec"), scope)
    from stompproto import Message

    # it prints what the comments under the print say
    shown = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# b'")]
    assert out.getvalue().splitlines() == shown == ["b'job' false", "b'job' true"]

    received = [e for e in scope["consumer"].received if isinstance(e, Message)]  # type: ignore[attr-defined]
    assert [m.body for m in received] == [b"job", b"job"]
    assert received[1].headers.get("redelivered") == "true"
