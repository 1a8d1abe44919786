"""The real `sansmq` console script and `python -m servers`: log line, serving, signals, errors."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import servers
from e2ekit import LISTEN_RE, fresh_data_dir, RawStomp, ServerProcess, close_quietly, connect, wait_until
from servers.management import OPS_EPHEMERAL

pytestmark = pytest.mark.timeout(60)

EXAMPLE_CONFIG = Path(servers.__file__).with_name("example-config.toml")


def sansmq_script() -> str:
    path = shutil.which("sansmq", path=os.path.dirname(sys.executable)) or shutil.which("sansmq")
    assert path, "the sansmq console script is not installed"
    return path


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_console_script_serves_and_stops_on_sigterm(kind: str) -> None:
    cmd = [sansmq_script(), "serve", *OPS_EPHEMERAL, "--server", kind, "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir(),
           "--config", str(EXAMPLE_CONFIG)]
    srv = ServerProcess(cmd, kind)
    try:
        wait_until(lambda: sum(bool(LISTEN_RE.fullmatch(ln)) for ln in srv.lines) == 5, 10, "five lines")
        listening = [m.group(1) for ln in srv.lines if (m := LISTEN_RE.fullmatch(ln))]
        assert listening == ["stomp", "ws", "amqp", "http", "prometheus"], srv.lines  # one line per listener
        assert srv.addr[0] == "127.0.0.1" and srv.addr[1] > 0
        conn, coll = connect(srv.addr, "1.2")
        conn.subscribe("/queue/cli", id="1", headers={"receipt": "s"})
        coll.wait_receipt("s")
        conn.send("/queue/cli", "through the console script")
        assert coll.wait_messages(1)[0].body == "through the console script"
        raw = RawStomp(srv.addr)  # a second, idle connection the shutdown must close
        raw.connect("1.1")
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines
    coll.wait(lambda: coll.disconnected, 10, "the client to see the server close")
    raw.sock.settimeout(5)
    raw.read_until_closed()
    assert any(line.endswith("stopped") for line in srv.lines), srv.lines
    close_quietly(conn)


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_python_m_servers_stops_on_sigint(kind: str) -> None:
    srv = ServerProcess([sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", kind,
                         "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir()], kind)
    try:
        raw = RawStomp(srv.addr)
        raw.connect("1.2")
        srv.proc.send_signal(signal.SIGINT)
        assert srv.proc.wait(15) == 0, srv.lines
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    raw.sock.settimeout(5)
    raw.read_until_closed()
    with pytest.raises(OSError):
        socket.create_connection(srv.addr, timeout=2)


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servers", *args], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_bad_config_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = _run_cli("serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir(), "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and missing.stderr == (
        f"sansmq serve: error: config: {tmp_path / 'nope.toml'}: cannot read the config file: No such file or directory\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nno_such_limit = 1\n")
    res = _run_cli("serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir(), "--config", str(bad))
    assert res.returncode == 2 and res.stderr.startswith(f"sansmq serve: error: config: {bad}:2: limits.no_such_limit: "
                                                         "unknown key (known here: max_frame_size, ")
    assert res.stderr.count("\n") == 1


def test_no_listener_and_bad_address_are_usage_errors() -> None:
    assert _run_cli("serve", *OPS_EPHEMERAL, "--no-stomp", "--no-ws", "--no-amqp").returncode == 2
    res = _run_cli("serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:notaport", "--no-ws", "--no-amqp")
    assert res.returncode == 2 and "bad port" in res.stderr


def test_address_in_use_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = _run_cli("serve", *OPS_EPHEMERAL, "--server", "threads", "--stomp", f"127.0.0.1:{port}", "--no-ws", "--no-amqp", "--data", fresh_data_dir())
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines()[-1] == (f"sansmq serve: error: cannot listen for stomp on 127.0.0.1:{port}: Address "
                                           "already in use (choose another address with --stomp HOST:PORT, or turn "
                                           "it off with --no-stomp)")
    assert "Traceback" not in res.stderr


def test_log_level_warning_still_runs_quietly() -> None:
    srv = subprocess.Popen(
        [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir(), "--log-level", "warning"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        # no listening line at this level, so count its listening sockets through /proc instead: all
        # five (HTTP and Prometheus are bound first, before the SIGTERM handler is installed; the
        # protocol listeners after it)
        wait_until(lambda: len(_listening_ports(srv.pid)) >= 5, 15, "the server to listen")
    finally:
        srv.send_signal(signal.SIGTERM)
        out, _ = srv.communicate(timeout=15)
    assert srv.returncode == 0 and out == ""


def _listening_ports(pid: int) -> list[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    with open("/proc/net/tcp") as fh:
        return [int(parts[1].split(":")[1], 16) for parts in (line.split() for line in fh.readlines()[1:])
                if parts[3] == "0A" and parts[9] in inodes]  # 0A = LISTEN


def test_one_log_line_per_listener_with_ws() -> None:
    srv = ServerProcess([sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", "threads",
                         "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", fresh_data_dir()], "threads")
    try:
        wait_until(lambda: len([ln for ln in srv.lines if LISTEN_RE.fullmatch(ln)]) == 5, 10,
                   "five listening lines")
        found = [LISTEN_RE.fullmatch(ln) for ln in srv.lines]
        matches = [m for m in found if m]
        assert [m.group(1) for m in matches] == ["stomp", "ws", "amqp", "http", "prometheus"]
        ws_port = int(matches[1].group(3))
        assert ws_port not in (0, srv.addr[1])
        with socket.create_connection(("127.0.0.1", ws_port), timeout=5) as sock:
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                         b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 101")
    finally:
        assert srv.terminate() == 0
