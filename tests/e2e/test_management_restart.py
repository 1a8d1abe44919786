"""Config-file users seed the user database once: what the management API does to them survives a
restart of a real ``sansmq serve`` with the same data directory and config file (RabbitMQ's
default user seeds only a blank database; then the stored state wins)."""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from e2ekit import BASE_CONFIG, ServerProcess, fresh_data_dir

from servers.management import OPS_EPHEMERAL

pytestmark = pytest.mark.timeout(120)

CONFIG = BASE_CONFIG + """
[users.guest]
password = "guest"
loopback_only = true
tags = ["administrator"]

[users.doomed]
password = "doomed-pw"
tags = ["management"]

[users.changed]
password = "old-pw"
tags = ["management"]
"""


def serve(kind: str, config: Path, data: str) -> ServerProcess:
    return ServerProcess([sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", kind,
                          "--stomp", "127.0.0.1:0", "--no-ws", "--amqp", "127.0.0.1:0", "--data", data, "--config", str(config)],
                         kind)


def req(srv: ServerProcess, method: str, path: str, user: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    rq = urllib.request.Request(f"http://127.0.0.1:{srv.port('http')}{path}", data=data, method=method,
                                headers={"Authorization": "Basic " + base64.b64encode(user.encode()).decode(),
                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, None


@pytest.mark.parametrize("kind", ["asyncio"])
def test_api_changes_to_config_users_survive_a_restart(kind: str, tmp_path: Path) -> None:
    config = tmp_path / "sansmq.toml"
    config.write_text(CONFIG)
    data = fresh_data_dir()
    srv = serve(kind, config, data)
    try:
        assert req(srv, "GET", "/api/whoami", "doomed:doomed-pw")[0] == 200
        assert req(srv, "DELETE", "/api/users/doomed", "guest:guest")[0] == 204
        assert req(srv, "PUT", "/api/users/changed", "guest:guest",
                   {"password": "new-pw", "tags": "monitoring"})[0] == 204
        assert req(srv, "DELETE", "/api/permissions/%2F/changed", "guest:guest")[0] == 204
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
    srv = serve(kind, config, data)
    try:
        assert req(srv, "GET", "/api/whoami", "doomed:doomed-pw")[0] == 401  # stays deleted
        assert req(srv, "GET", "/api/users/doomed", "guest:guest")[0] == 404
        assert req(srv, "GET", "/api/whoami", "changed:old-pw")[0] == 401
        status, me = req(srv, "GET", "/api/whoami", "changed:new-pw")
        assert status == 200 and me["tags"] == ["monitoring"]
        assert req(srv, "GET", "/api/permissions/%2F/changed", "guest:guest")[0] == 404
        assert req(srv, "GET", "/api/whoami", "guest:guest")[0] == 200  # untouched config user
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
    # a user added to the config file later is seeded at the next start
    config.write_text(CONFIG + '\n[users.later]\npassword = "later-pw"\ntags = ["management"]\n')
    srv = serve(kind, config, data)
    try:
        assert req(srv, "GET", "/api/whoami", "later:later-pw")[0] == 200
        assert req(srv, "GET", "/api/whoami", "doomed:doomed-pw")[0] == 401
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
