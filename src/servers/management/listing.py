"""Large listings without holding the broker: figures fetched in chunks, RabbitMQ's pagination,
and JSON answers streamed a chunk at a time.

With 100,000 queues one snapshot of them all held the broker's loop for seconds and kept hundreds
of MB alive. Here the objects' references are copied in one short turn of the loop, and their
figures are built ``CHUNK`` objects per turn (other clients are served in between); a page needs
only its own objects, and a full listing is streamed and freed as it goes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.model.regex_guard import may_explode

from .request import HttpError, Request, bad_request

__all__ = ["CHUNK", "Page", "Streamed", "chunked", "page_of"]

#: objects whose figures are built per turn of the broker's loop
CHUNK = 1000
#: RabbitMQ's page sizes: 100 unless asked, at most 500
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


def chunked(call: Callable[[Callable[[Any], Any]], Any], fn: Callable[[Any, list[Any]], list[Any]],
            refs: list[Any]) -> Iterator[list[Any]]:
    """``fn(broker, part)`` for ``refs`` CHUNK at a time, each part its own call on the broker's thread."""
    def run(part: list[Any]) -> Callable[[Any], list[Any]]:
        return lambda broker: fn(broker, part)

    for start in range(0, len(refs), CHUNK):
        yield call(run(refs[start:start + CHUNK]))


class Streamed:
    """A JSON array answer built while it is sent: the parts come from an iterator of lists."""

    def __init__(self, parts: Iterable[list[Any]]) -> None:
        self.parts = parts

    def __iter__(self) -> Iterator[bytes]:
        yield b"["
        first = True
        for part in self.parts:
            if part:
                text = json.dumps(part, default=str)[1:-1]
                yield (text if first else "," + text).encode()
                first = False
        yield b"]"


@dataclass(frozen=True, slots=True)
class Page:
    """RabbitMQ's ``page``/``page_size``/``name``/``use_regex`` query parameters."""

    page: int
    size: int
    name: str
    regex: bool

    @staticmethod
    def of(req: Request) -> Page | None:
        """The request's pagination (None without ``page``: the plain list); a 400 when invalid."""
        page, size = req.query.get("page", [None])[0], req.query.get("page_size", [str(DEFAULT_PAGE_SIZE)])[0]
        if page is None:
            return None
        if not (page.isdigit() and size.isdigit() and int(page) > 0 and 0 < int(size) <= MAX_PAGE_SIZE):
            raise HttpError(400, "bad_request", f"Invalid pagination parameters: page number {page}, page size {size}"
                            f" (page > 0, 0 < page_size <= {MAX_PAGE_SIZE})")
        return Page(int(page), int(size), req.query.get("name", [""])[0],
                    req.query.get("use_regex", ["false"])[0].lower() == "true")

    def matcher(self) -> Callable[[str], bool]:
        """The ``name`` filter: a case-insensitive substring, or a case-insensitive regex search."""
        if not self.name:
            return lambda _: True
        if self.regex:
            try:
                pattern = re.compile(self.name, re.IGNORECASE)
            except re.error as exc:
                raise bad_request(f"invalid regular expression {self.name!r}: {exc}") from None
            if may_explode(self.name):  # Python's matcher holds the GIL: a runaway match would freeze the broker too
                raise bad_request(f"regular expression {self.name!r} repeats a repeat or an alternation, or "
                                  "refers back to a group (its matching time can explode); write it without")
            return lambda name: pattern.search(name) is not None
        wanted = self.name.lower()
        return lambda name: wanted in name.lower()


def page_of(page: Page, refs: list[Any], name: Callable[[Any], str], total: int,
            items: Callable[[list[Any]], list[Any]]) -> dict[str, Any]:
    """RabbitMQ's paginated answer: the ``refs`` (already in order) whose ``name`` matches, the
    page's slice of them as ``items(slice)``, and the counts."""
    matches = page.matcher()
    filtered = [r for r in refs if matches(name(r))] if page.name else refs
    count = math.ceil(len(filtered) / page.size)
    if page.page > max(1, count):  # page 1 of nothing is an empty page
        raise HttpError(400, "bad_request", f"Page out of range, page: {page.page} page size: {page.size}, "
                                            f"len: {len(filtered)}")
    listed = items(filtered[(page.page - 1) * page.size:page.page * page.size])
    return {"filtered_count": len(filtered), "item_count": len(listed), "items": listed, "page": page.page,
            "page_count": count, "page_size": page.size, "total_count": total}
