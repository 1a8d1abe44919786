"""Fixtures of the cluster tests: a PostgreSQL server for the module, a fresh database per test,
and the nodes started on it (real ``python -m servers serve --node`` processes on loopback)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))  # enginetest_helpers

from clusterkit import Nodes  # noqa: E402
from pgtest import fresh_db, throwaway_server  # noqa: E402


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    """A PostgreSQL server for the module (``pgtest.throwaway_server``: skipped without one unless
    ``SANSMQ_REQUIRE_POSTGRES=1``)."""
    with throwaway_server() as url:
        yield url


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server (dropped afterwards)."""
    with fresh_db(pg_server) as url:
        yield url


@pytest.fixture
def nodes(pg_dsn: str) -> Iterator[Nodes]:
    """Start nodes with ``nodes.start("a", "b", "c")``; every one still running is killed at the end."""
    group = Nodes(pg_dsn)
    try:
        yield group
    finally:
        group.kill_all()
