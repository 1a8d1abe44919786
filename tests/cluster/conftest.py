"""Fixtures of the cluster tests: a PostgreSQL server for the module, a fresh database per test,
and the nodes started on it (real ``python -m servers serve --node`` processes on loopback)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from clusterkit import Nodes  # noqa: E402
from pgtest import PgCluster, create_db, drop_db, postgres_bindir  # noqa: E402


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    """``SANSMQ_PG_DSN`` or a throwaway PostgreSQL (skipped without one unless
    ``SANSMQ_REQUIRE_POSTGRES=1``, as tests/storage)."""
    url = os.environ.get("SANSMQ_PG_DSN")
    if url:
        yield url
        return
    if postgres_bindir() is None:
        reason = "PostgreSQL not found (install it with scripts/install-postgres.sh)"
        if os.environ.get("SANSMQ_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason + " but SANSMQ_REQUIRE_POSTGRES=1")
        pytest.skip(reason)
    server = PgCluster()
    try:
        url = server.start()
    except RuntimeError as exc:
        if os.environ.get("SANSMQ_REQUIRE_POSTGRES") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    url = create_db(pg_server)
    try:
        yield url
    finally:
        drop_db(pg_server, url)


@pytest.fixture
def nodes(pg_dsn: str) -> Iterator[Nodes]:
    """Start nodes with ``nodes.start("a", "b", "c")``; every one still running is killed at the end."""
    group = Nodes(pg_dsn)
    try:
        yield group
    finally:
        group.kill_all()
