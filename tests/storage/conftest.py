import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from pgtest import fresh_db, throwaway_server

settings.register_profile(
    "ci", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

STORE_KINDS = ("segment", "postgres")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of a PostgreSQL server for the session (``pgtest.throwaway_server``)."""
    with throwaway_server() as url:
        yield url


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server (dropped afterwards)."""
    with fresh_db(pg_server) as url:
        yield url


class StoreFactory:
    """Opens the store of one kind at one place (a directory or a database), again and again."""

    def __init__(self, kind: str, where: str, **kw: Any) -> None:
        self.kind = kind
        self.where = where
        self.kw = kw
        self._fresh = 0

    def open(self, **kw: Any) -> Any:
        kw = {**self.kw, **kw}
        if self.kind == "segment":
            from engine.segment_store import SegmentStore

            return SegmentStore(self.where, **kw)
        from engine.postgres_store import PostgresStore

        return PostgresStore(self.where, **kw)

    def fresh(self) -> "StoreFactory":
        """Another, empty place of the same kind (a new directory; a new schema in the database)."""
        self._fresh += 1
        if self.kind == "segment":
            return StoreFactory("segment", f"{self.where}-{self._fresh}", **self.kw)
        return StoreFactory("postgres", self.where, **{**self.kw, "schema": f"sansmq_{self._fresh}"})


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Every durability test runs once per store: the segment files and PostgreSQL."""
    if request.param == "segment":
        return StoreFactory("segment", str(tmp_path / "data"))
    return StoreFactory("postgres", request.getfixturevalue("pg_dsn"))
