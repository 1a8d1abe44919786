"""The README's sansmq_client example runs as written against a real broker."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from clientkit import Broker

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_client_example(broker: Broker) -> None:
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
               if "sansmq_client.asyncio.connect" in b]
    code = code.replace("127.0.0.1:5672", f"127.0.0.1:{broker.ports['amqp']}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == ["b'hello'"]
