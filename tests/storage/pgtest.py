"""A throwaway PostgreSQL server for the tests, started with scripts/install-postgres.sh.

``PgCluster.start()`` creates a cluster in a fresh temporary directory (under /tmp so that the
``postgres`` user can reach it when we are root), on 127.0.0.1 and a free port; ``stop()`` stops it
and removes the directory. ``create_db()`` makes a fresh database and returns its URL.
``shared_cluster()`` is one such cluster per test process, for the many suites whose tests each take
a fresh database on it.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-postgres.sh"
_names = itertools.count(1)


def postgres_bindir() -> str | None:
    """Where initdb/pg_ctl are, or None when PostgreSQL is not installed."""
    out = subprocess.run(["bash", str(SCRIPT), "bindir"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def with_db(url: str, dbname: str) -> str:
    return urlsplit(url)._replace(path="/" + dbname).geturl()


class PgCluster:
    def __init__(self) -> None:
        self.dir = ""
        self.url = ""

    def start(self) -> str:
        self.dir = tempfile.mkdtemp(prefix="sansmq-pg-")
        out = subprocess.run(["bash", str(SCRIPT), "start", self.dir], capture_output=True, text=True, timeout=180)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("SANSMQ_PG_DSN=")]
        if out.returncode != 0 or not lines:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError(f"could not start PostgreSQL: {out.stderr[-2000:]}")
        self.url = lines[-1].split("=", 1)[1]
        return self.url

    def stop(self, remove: bool = True) -> None:
        """Fast shutdown (clients are disconnected); ``remove=False`` keeps the data to start again."""
        if self.dir:
            subprocess.run(["bash", str(SCRIPT), "stop", self.dir], capture_output=True, timeout=120)
            if remove:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = ""

    def restart(self) -> None:
        """Start the stopped cluster again on the same port."""
        port = Path(self.dir, "port").read_text().strip()
        bindir = postgres_bindir()
        assert bindir is not None
        opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={self.dir} -c fsync=on"
        cmd = [f"{bindir}/pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/data.log", "-w", "-t", "60",
               "start", "-o", opts]
        if os.getuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)


_shared: dict[str, str] = {}  # "url" of the process's shared cluster once started


def shared_cluster() -> str:
    """URL of a throwaway cluster started on first use and stopped when the test process exits.
    The storage, cluster, e2e and pipeline suites each give every test a fresh database, so one
    initdb and server start (seconds on a loaded machine) serves them all instead of one per module.
    Raises RuntimeError like ``PgCluster.start``."""
    if "url" not in _shared:
        cluster = PgCluster()
        _shared["url"] = cluster.start()
        atexit.register(cluster.stop)
    return _shared["url"]


HA_SCRIPT = SCRIPT.with_name("pg-ha.sh")


class PgHa:
    """A primary with a synchronous standby (scripts/pg-ha.sh) in a fresh temporary directory."""

    def __init__(self) -> None:
        self.dir = ""
        self.urls: dict[str, str] = {}  # PRIMARY, STANDBY and DSN (both hosts, read-write)

    def _run(self, cmd: str) -> str:
        out = subprocess.run(["bash", str(HA_SCRIPT), cmd, self.dir], capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"pg-ha.sh {cmd} failed: {out.stderr[-2000:]}")
        return out.stdout

    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sansmq-pgha-")
        try:
            out = self._run("start")
        except RuntimeError:
            self.stop()
            raise
        for line in out.splitlines():
            if line.startswith("SANSMQ_PG_"):
                key, url = line.removeprefix("SANSMQ_PG_").split("=", 1)
                self.urls[key] = url

    def crash_primary(self) -> None:
        self._run("crash")

    def promote(self) -> None:
        self._run("promote")

    def stop(self) -> None:
        if self.dir:
            subprocess.run(["bash", str(HA_SCRIPT), "stop", self.dir], capture_output=True, timeout=120)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""


def create_db(admin_url: str) -> str:
    import psycopg

    name = f"sansmq_t{os.getpid()}_{next(_names)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_db(admin_url, name)


def drop_db(admin_url: str, url: str) -> None:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass  # the server went away (a fault-injection test): nothing left to drop


@contextlib.contextmanager
def throwaway_server() -> Iterator[str]:
    """URL of a PostgreSQL server for a test session or module: ``SANSMQ_PG_DSN`` if set, else the
    process's ``shared_cluster()``. Without PostgreSQL the tests using it are
    skipped, unless ``SANSMQ_REQUIRE_POSTGRES=1`` (CI, after installing it): then they fail."""
    import pytest

    url = os.environ.get("SANSMQ_PG_DSN")
    if url:
        yield url
        return
    required = os.environ.get("SANSMQ_REQUIRE_POSTGRES") == "1"
    if postgres_bindir() is None:
        reason = "PostgreSQL not found (install it with scripts/install-postgres.sh)"
        if required:
            pytest.fail(reason + " but SANSMQ_REQUIRE_POSTGRES=1")
        pytest.skip(reason)
    try:
        url = shared_cluster()
    except RuntimeError as exc:
        if required:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield url


@contextlib.contextmanager
def fresh_db(server_url: str) -> Iterator[str]:
    """A fresh, empty database on ``server_url`` (dropped afterwards)."""
    url = create_db(server_url)
    try:
        yield url
    finally:
        drop_db(server_url, url)
