"""``sansmq serve --data DIR --sync on|off --store segment|memory``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from engine import MemoryStore
from engine.segment_store import SegmentStore
from servers._run import make_store
from servers.cli import PROTOCOLS, build_parser


def test_parser_storage_options() -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.data, args.sync, args.store) == ("./sansmq-data", "on", "segment")
    args = build_parser().parse_args(["serve", "--data", "/x", "--sync", "off", "--store", "memory"])
    assert (args.data, args.sync, args.store) == ("/x", "off", "memory")


def test_make_store(tmp_path: Path, caplog) -> None:
    assert isinstance(make_store(None), MemoryStore)
    s = make_store(str(tmp_path / "on"))
    assert isinstance(s, SegmentStore) and s.fsync and not caplog.records
    s.close()
    s = make_store(str(tmp_path / "off"), sync=False)
    assert not s.fsync and "--sync off" in caplog.text
    s.close()


ONLY_STOMP = ["--stomp", "127.0.0.1:0", *(f"--no-{p}" for p, _, _ in PROTOCOLS if p != "stomp"), "--no-http",
              "--no-prometheus"]


def serve(*extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "servers", "serve", *ONLY_STOMP, *extra],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "listening on" in line:
            break
    return proc, lines


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    return err


def test_serve_sync_off_warns_and_second_server_on_same_dir_refused(tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc, lines = serve("--data", str(data), "--sync", "off")
    try:
        text = "".join(lines)
        assert "listening on" in text and "--sync off" in text and "can lose" in text
        assert (data / "journal").exists()
        other = subprocess.run([sys.executable, "-m", "servers", "serve", *ONLY_STOMP, "--data", str(data)],
                               capture_output=True, text=True, timeout=30)
        assert other.returncode == 1 and "in use" in other.stderr
    finally:
        stop(proc)
    assert proc.returncode == 0
