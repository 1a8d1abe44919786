"""Fixtures of the client tests: one broker for the session, a fresh one (own ports and data) per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clientkit import Broker, make_broker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = make_broker(tmp_path_factory.mktemp("client-broker")).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[Broker]:
    b = make_broker(tmp_path)
    try:
        yield b
    finally:
        b.stop()
