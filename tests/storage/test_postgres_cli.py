"""``sansmq serve --store postgresql://...``: the store is named in the log, messages survive a
restart of the process, a second broker on the same database is refused."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from engine.postgres_store import PostgresStore
from servers._run import make_store
from servers.cli import build_parser
from test_storage_cli import ONLY_STOMP, serve, stop
from test_store_servers import stomp_connect


def test_parser_accepts_a_postgresql_url() -> None:
    args = build_parser().parse_args(["serve", "--store", "postgresql://u@127.0.0.1:5432/db"])
    assert args.store == "postgresql://u@127.0.0.1:5432/db"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--store", "mysql://x"])


def test_make_store_opens_postgres_and_says_so(pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sansmq")
    s = make_store(pg_dsn)
    assert isinstance(s, PostgresStore) and s.fsync
    assert "store: PostgreSQL postgresql://sansmq@127.0.0.1" in caplog.text
    s.close()


def listen_port(lines: list[str]) -> int:
    line = next(ln for ln in lines if "stomp listening on" in ln)
    return int(line.rsplit(":", 1)[1].split()[0])


def test_serve_on_postgres_survives_restart_and_refuses_a_second_broker(pg_dsn: str) -> None:
    proc, lines = serve("--store", pg_dsn)
    try:
        text = "".join(lines)
        assert "store: PostgreSQL" in text and "listening on" in text, text
        conn, lst = stomp_connect(("127.0.0.1", listen_port(lines)))
        conn.send("/queue/cli", b"kept", headers={"persistent": "true", "receipt": "r"})
        assert lst.wait(lambda: "r" in lst.receipts)
        conn.disconnect()
        other = subprocess.run([sys.executable, "-m", "servers", "serve", *ONLY_STOMP, "--store", pg_dsn],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode == 1 and "in use by another sansmq broker" in other.stderr
    finally:
        stop(proc)
    assert proc.returncode == 0
    proc, lines = serve("--store", pg_dsn)
    try:
        conn, lst = stomp_connect(("127.0.0.1", listen_port(lines)))
        conn.subscribe("/queue/cli", id="s", ack="auto")
        assert lst.wait(lambda: lst.messages == [b"kept"])
        conn.disconnect()
    finally:
        stop(proc)


def test_serve_with_an_unreachable_database_exits_with_a_clear_error() -> None:
    out = subprocess.run([sys.executable, "-m", "servers", "serve", *ONLY_STOMP,
                          "--store", "postgresql://nobody@127.0.0.1:1/none"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and "cannot open the store" in out.stderr and "PostgreSQL" in out.stderr


