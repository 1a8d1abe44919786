"""Every failure a user can cause is one line on stderr with a documented exit status, never a
traceback: the real `sansmq` console script (and `python -m servers`) as a subprocess."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from e2ekit import ServerProcess, fresh_data_dir
from test_e2e_cli import EXAMPLE_CONFIG, sansmq_script

import servers
from servers.management import OPS_EPHEMERAL

pytestmark = pytest.mark.timeout(60)

QUIET = ("--stomp", "127.0.0.1:0", "--no-ws", "--no-amqp", "--log-level", "warning", *OPS_EPHEMERAL)


def sansmq(*args: str, python_prelude: str = "") -> subprocess.CompletedProcess[str]:
    if python_prelude:  # run the CLI in an interpreter prepared by ``python_prelude``
        cmd = [sys.executable, "-c", f"{python_prelude}\nimport sys\nfrom servers.cli import main\n"
                                     "sys.argv[0] = 'sansmq'\nsys.exit(main())", *args]
    else:
        cmd = [sansmq_script(), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def one_line_error(res: subprocess.CompletedProcess[str], status: int) -> str:
    assert res.returncode == status, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and res.stdout == "", res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def config_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sansmq.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("text", "message"), [
    ('[users.app]\nvhosts = ["/"]\n',
     "{f}:1: users.app.password: missing (every user needs a password)"),
    ('anonymous_user = "guest"\nlistener = "0.0.0.0"\n',
     "{f}:2: listener: unknown key (known here: anonymous_user, anonymous_password, vhosts, default_vhost, trace_vhosts, event_vhost, users, limits, http, prometheus, https, prometheus_https, definitions, tls, disk_free_limit, websocket, cluster)"),
    ('[users.app]\npassword = ""\n',
     "{f}:2: users.app.password: must not be blank (RabbitMQ refuses blank passwords)"),
    ('anonymous_user = "guest"\n',
     "{f}:1: anonymous_user: anonymous_user needs anonymous_password (the password it logs in with)"),
    ('[users.guest]\npassword = "guest"\nloopback_only = "yes"\n',
     '{f}:3: users.guest.loopback_only: expected true or false, got the string "yes"'),
    ('[users.app]\npassword = 1234\n',
     "{f}:2: users.app.password: expected a string, got an integer 1234"),
    ('[users.app]\npassword = "x"\nroles = ["admin"]\n',
     "{f}:3: users.app.roles: unknown key (known here: password, loopback_only, vhosts, tags)"),
    ('[limits]\n\n# a comment\nheartbeat = 10000\n',
     "{f}:4: limits.heartbeat: expected an array of two integers, e.g. [10000, 10000], got an integer 10000"),
    ('[limits]\nmax_body_size = "16MiB"\n',
     '{f}:2: limits.max_body_size: expected a non-negative integer, got the string "16MiB"'),
    ('vhosts = "/"\n', '{f}:1: vhosts: expected an array of strings, got the string "/"'),
    ('[users]\n[users.a]\npassword = "x"\n[users.b\n', "{f}:4: invalid TOML: Expected ']' at the end of a table declaration"),
])
def test_config_errors_name_the_key_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = config_file(tmp_path, text)
    line = one_line_error(sansmq("serve", "--config", path, "--check-config", *QUIET), 2)
    assert line == "sansmq serve: error: config: " + message.format(f=path)
    # the same when starting for real: nothing is opened before the config is known good
    assert one_line_error(sansmq("serve", "--config", path, "--data", fresh_data_dir(), *QUIET), 2) == line


def test_check_config_accepts_the_example_and_exits_0() -> None:
    res = sansmq("serve", "--config", str(EXAMPLE_CONFIG), "--check-config")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.startswith(f"config OK: {EXAMPLE_CONFIG}: 2 user(s), vhosts /, staging; listeners stomp 127.0.0.1:61613")


def test_version_and_usage() -> None:
    res = sansmq("--version")
    assert res.returncode == 0 and res.stdout.strip() == "sansmq 0.1.0"
    bad = sansmq("serve", "--no-such-flag", *QUIET)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("usage: sansmq serve ") and "--check-config" in bad.stderr
    assert bad.stderr.rstrip().endswith("sansmq serve: error: unrecognized arguments: --no-such-flag")
    choice = sansmq("serve", "--server", "gevent", *QUIET)
    assert choice.returncode == 2 and choice.stderr.startswith("usage: sansmq serve ")
    bench = sansmq("bench", "--no-such-flag")
    assert bench.returncode == 2 and bench.stderr.startswith("usage: sansmq bench ")
    top = sansmq()
    assert top.returncode == 2 and top.stderr.startswith("usage: sansmq [-h] [--version]")
    helped = sansmq("serve", "--help")
    assert helped.returncode == 0 and "exit status: 0 stopped cleanly" in helped.stdout


def test_missing_trio_is_a_one_line_hint() -> None:
    res = sansmq("serve", "--server", "trio", *QUIET, python_prelude="import sys; sys.modules['trio'] = None")
    assert one_line_error(res, 1) == ("sansmq serve: error: the trio server needs the 'trio' package, which is not "
                                      "installed: pip install 'sansmq[trio]'")


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_port_in_use_names_the_listener(kind: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = sansmq("serve", *OPS_EPHEMERAL, "--server", kind, "--stomp", "127.0.0.1:0", "--no-ws", "--amqp", f"127.0.0.1:{port}",
                     "--data", fresh_data_dir(), "--log-level", "warning")
    assert one_line_error(res, 1) == (f"sansmq serve: error: cannot listen for amqp on 127.0.0.1:{port}: Address "
                                      "already in use (choose another address with --amqp HOST:PORT, or turn it "
                                      "off with --no-amqp)")


@pytest.mark.parametrize("listener", ["http", "prometheus"])
def test_ops_port_in_use_names_the_listener(listener: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        where = {name: f"127.0.0.1:{port}" if name == listener else "127.0.0.1:0" for name in ("http", "prometheus")}
        res = sansmq("serve", "--stomp", "127.0.0.1:0", "--no-ws", "--no-amqp", "--http", where["http"],
                     "--prometheus", where["prometheus"], "--data", fresh_data_dir(), "--log-level", "warning")
    assert one_line_error(res, 1) == (f"sansmq serve: error: cannot listen for {listener} on 127.0.0.1:{port}: "
                                      f"Address already in use (choose another address with --{listener} HOST:PORT "
                                      f"or '{listener}' in the config file, or turn it off with --no-{listener})")


@pytest.mark.parametrize("taken_by", ["amqp", "http", "prometheus"])
def test_no_listening_line_before_every_listener_is_bound(taken_by: str) -> None:
    """An address conflict on any listener, the HTTP ones included, stops the start before the first
    "listening" line: an operator (or a supervisor) never sees a broker that looked up and was not."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        where = {name: f"127.0.0.1:{port}" if name == taken_by else "127.0.0.1:0"
                 for name in ("amqp", "http", "prometheus")}
        res = sansmq("serve", "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--amqp", where["amqp"],
                     "--http", where["http"], "--prometheus", where["prometheus"], "--data", fresh_data_dir(),
                     "--log-level", "info")
    assert res.returncode == 1, res.stderr
    assert f"cannot listen for {taken_by} on 127.0.0.1:{port}" in res.stderr.splitlines()[-1]
    assert "listening on" not in res.stderr, res.stderr


@pytest.mark.parametrize("doc", ["[" * 100_000, '{"users": ' + "[" * 100 + "]" * 100 + "}"])
def test_a_deeply_nested_definitions_file_is_one_line(tmp_path: Path, doc: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(doc)
    line = one_line_error(sansmq("serve", "--definitions", str(path), "--data", fresh_data_dir(), *QUIET), 2)
    assert line == f"sansmq serve: error: definitions file {path} nests deeper than 64 levels"


def test_data_directory_problems(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    line = one_line_error(sansmq("serve", "--data", str(not_a_dir), *QUIET), 1)
    assert line == f"sansmq serve: error: cannot open the data directory {not_a_dir}: Not a directory ({not_a_dir}/segments)"
    data = fresh_data_dir()
    first = ServerProcess([sansmq_script(), "serve", "--data", data, "--stomp", "127.0.0.1:0", "--no-ws", "--no-amqp",
                          *OPS_EPHEMERAL],
                          "threads")  # listening: it holds the directory's lock
    try:
        second = sansmq("serve", "--data", data, *QUIET)
        assert one_line_error(second, 1) == (f"sansmq serve: error: cannot open the store: data directory {data} "
                                             "is in use by another process")
    finally:
        assert first.terminate() == 0


def test_bad_store_url_and_log_file(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    line = one_line_error(sansmq("serve", "--store", f"postgresql://nobody@127.0.0.1:{port}/db", *QUIET), 1)
    assert line.startswith(f"sansmq serve: error: cannot open the store: PostgreSQL store postgresql://nobody@127.0.0.1:{port}/db: ")
    assert "Connection refused" in line
    bad_scheme = sansmq("serve", "--store", "mysql://x", *QUIET)
    assert bad_scheme.returncode == 2 and "expected segment, memory or a postgresql:// URL, not 'mysql://x'" in bad_scheme.stderr
    line = one_line_error(sansmq("serve", "--log-file", str(tmp_path / "no" / "such" / "dir.log"), *QUIET), 1)
    assert line == f"sansmq serve: error: cannot open the log file {tmp_path / 'no' / 'such' / 'dir.log'}: No such file or directory"
    line = one_line_error(sansmq("serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:99999", "--no-ws", "--no-amqp"), 2)
    assert line == "sansmq serve: error: --stomp: bad port in '127.0.0.1:99999'"


def test_data_directory_without_permission() -> None:
    """Run as an unprivileged user (root passes every permission check) on a directory it may not enter."""
    base = Path(fresh_data_dir())  # under /tmp: every parent may be entered, unlike pytest's tmp_path
    base.chmod(0o755)
    locked = base / "locked"
    locked.mkdir(mode=0o700)
    cmd = [sansmq_script(), "serve", "--data", str(locked / "data"), *QUIET]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "util-linux setpriv is needed to drop root for this test"
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    else:
        locked.chmod(0o500)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert one_line_error(res, 1) == (f"sansmq serve: error: cannot use the data directory {locked / 'data'}: "
                                      f"Permission denied ({locked / 'data'}); choose another with --data or fix its "
                                      "permissions")
