from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakebroker import LineBroker

import servers


@pytest.fixture(params=servers.SERVER_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def fake(kind: str) -> Iterator[tuple[servers.Running, LineBroker]]:
    broker = LineBroker()
    with servers.running(kind, [("stomp", "127.0.0.1", 0)], broker=broker) as srv:
        yield srv, broker
    assert len(broker.threads) == 1, "broker called from more than one thread"
    assert not broker.late_calls, broker.late_calls
