"""SASL PLAIN and AMQPLAIN responses for connection.start-ok (build and parse)."""

from __future__ import annotations

from ._readers import read_table
from ._writers import write_table


def plain_response(username: str, password: str) -> bytes:
    """PLAIN: ``\\0user\\0password`` (RFC 4616, empty authorisation identity)."""
    return b"\0" + username.encode() + b"\0" + password.encode()


def amqplain_response(username: str, password: str) -> bytes:
    """AMQPLAIN: a field table with LOGIN and PASSWORD, without its 4-byte size prefix."""
    return write_table({"LOGIN": username, "PASSWORD": password})[4:]


def parse_sasl_response(mechanism: str, response: bytes) -> tuple[str, str]:
    """Server side: ``(username, password)`` from a start-ok response; ValueError if bad."""
    if mechanism == "PLAIN":
        parts = bytes(response).split(b"\0")
        if len(parts) != 3:
            raise ValueError("PLAIN response must be authzid\\0user\\0password")
        return parts[1].decode(), parts[2].decode()
    if mechanism == "AMQPLAIN":
        body = bytes(response)
        try:
            table, _ = read_table(len(body).to_bytes(4, "big") + body, 0)
        except (ValueError, IndexError) as e:
            raise ValueError(f"malformed AMQPLAIN response: {e}") from e
        user, password = table.get("LOGIN"), table.get("PASSWORD")
        if not isinstance(user, str) or not isinstance(password, str):
            raise ValueError("AMQPLAIN response needs LOGIN and PASSWORD strings")
        return user, password
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
