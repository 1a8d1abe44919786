"""How AMQP arguments travel in the definitions change log: as hex of the AMQP table codec, which
keeps every value's type (a JSON round trip would turn a long into a float or bytes into text)."""

from __future__ import annotations

from typing import Any

from amqpproto import read_table, write_table

__all__ = ["encode_args", "decode_args"]


def encode_args(args: dict[str, Any] | None) -> str | None:
    return None if args is None else write_table(args).hex()


def decode_args(text: str | None) -> dict[str, Any] | None:
    return None if text is None else read_table(bytes.fromhex(text), 0)[0]
