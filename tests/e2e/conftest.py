"""Fixtures of the end-to-end suite (helpers live in e2ekit.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2ekit import BASE_CONFIG, ServerProcess, start_server

import servers


@pytest.fixture(scope="module", params=servers.SERVER_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def server_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Override in a module to change the broker's TOML config."""
    return BASE_CONFIG


@pytest.fixture(scope="module")
def server(kind: str, server_config: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(server_config)
    srv = start_server(kind, path)
    try:
        yield srv
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


