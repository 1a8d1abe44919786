"""The definitions change log's pieces shared by the store that writes it and the model that
applies it: AMQP arguments as hex of the AMQP table codec (which keeps every value's type: a JSON
round trip would turn a long into a float or bytes into text), and muting a store while another
node's change is applied (it is in the database already)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from amqpproto import read_table, write_table

__all__ = ["encode_args", "decode_args", "Muting"]


def encode_args(args: dict[str, Any] | None) -> str | None:
    return None if args is None else write_table(args).hex()


def decode_args(text: str | None) -> dict[str, Any] | None:
    return None if text is None else read_table(bytes.fromhex(text), 0)[0]


class Muting:
    """A store that writes nothing while ``muted`` (another node's change being applied here)."""

    muted = False

    @contextmanager
    def mute(self) -> Iterator[None]:
        self.muted = True
        try:
            yield
        finally:
            self.muted = False
