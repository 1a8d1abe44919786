"""A server's publishes with their property lists kept as received (``Connection(raw_properties=...)``).

The publish fast path of a server that asks for it returns ``BasicPublish.properties`` as a
``RawProperties``: the property list's bytes (flag word on) and the ``PropertyShape`` they share
with the publishes of the same shape, decoded once. Producers repeat a few shapes: the same
properties, or the same but for one integer header that counts up (a publishing id). That header is
named when the connection is made; a list that differs from a known shape only in that header's
value bytes is of that shape, checked with two slice comparisons, nothing parsed. So the receiver
can store or forward the bytes as they came and decode only what it needs, once per shape.

Every list handed out was validated: a shape is learned by decoding (``decode_properties``) its
first list, and a varying header's span is trusted only when decoding the list with those bytes
changed gives the same properties with that header's value changed: the bytes are that integer's
value and nothing else, so any value there is valid. A list that does not decode is not given a
shape (the connection's general path then reports it as it always does).
"""

from __future__ import annotations

import struct
from typing import Any

from . import spec
from ._limits import CACHE_MAX

__all__ = ["RawProperties", "PropertyShape", "PropertyShapes", "PublishParsing"]

_decode = spec.decode_properties
#: field table integer types: the struct of the value after the type octet
_INTS = {ord(t): struct.Struct(">" + f) for t, f in (("b", "b"), ("B", "B"), ("s", "h"), ("u", "H"),
                                                     ("I", "i"), ("i", "I"), ("l", "q"), ("L", "Q"))}
#: the property lists a publish most often carries: delivery-mode only (1 or 2)
_DELIVERY_MODE_ONLY = b"\x10\x00"


class PropertyShape:
    """What every property list of one shape shares: ``props`` (the first one's decode: read only)
    and, when the varying header sits in it, where its value is (``at``, ``-1`` if not: then
    every list of the shape is the same bytes) and its struct. ``memo`` is the receiver's: what it
    made of the shape, kept with it (None until it says)."""

    __slots__ = ("props", "name", "at", "int", "memo")

    def __init__(self, props: spec.BasicProperties, name: str | None, at: int = -1,
                 fmt: struct.Struct | None = None) -> None:
        self.props = props
        #: the varying header's name
        self.name = name
        self.at = at
        self.int = fmt
        self.memo: Any = None


class RawProperties:
    """One publish's property list as received (``raw``, the flag word on) and its shape."""

    __slots__ = ("raw", "shape")

    def __init__(self, raw: bytes, shape: PropertyShape) -> None:
        self.raw = raw
        self.shape = shape

    def varying(self) -> Any:
        """The varying header's value in this list (None when the shape has no such header)."""
        shape = self.shape
        if shape.at < 0:
            headers = shape.props.headers
            return None if headers is None or shape.name is None else headers.get(shape.name)
        return shape.int.unpack_from(self.raw, shape.at)[0]  # type: ignore[union-attr]

    def decode(self) -> spec.BasicProperties:
        """The properties as the general path decodes them (a new object each time)."""
        raw = self.raw
        if len(raw) == 3 and raw[:2] == _DELIVERY_MODE_ONLY:
            return spec.BasicProperties(delivery_mode=raw[2])
        return _decode(raw, 0, len(raw))

    def view(self) -> spec.BasicProperties:
        """The properties decoded, for reading only: the shape's own object when every list of the
        shape is these bytes (nothing decoded again), else ``decode()``."""
        shape = self.shape
        return shape.props if shape.at < 0 else self.decode()

    def __repr__(self) -> str:
        return f"RawProperties({self.raw!r})"


class PropertyShapes:
    """One connection's known shapes (at most ``CACHE_MAX``: a full cache starts over). ``varying``:
    the name of the integer header that may differ between lists of one shape (None: none); ``runs``:
    the connection hands out runs of publishes (``PublishRun``)."""

    __slots__ = ("_key", "_exact", "_masked", "_last", "name", "runs")

    def __init__(self, varying: str | None, runs: bool = False) -> None:
        self.name = varying
        self.runs = runs
        #: what precedes a varying header's type octet in a table: its name's length and name
        self._key = b"" if varying is None else bytes([len(varying.encode())]) + varying.encode()
        self._exact: dict[bytes, PropertyShape] = {}
        #: shapes with a varying header: by the list without its value bytes
        self._masked: dict[bytes, PropertyShape] = {}
        #: the shape with a varying header met last: (length, bytes before the value, after, shape)
        self._last: tuple[int, bytes, bytes, PropertyShape] | None = None

    def get(self, raw: bytes) -> RawProperties | None:
        """``raw`` with its shape; None if it does not decode."""
        last = self._last
        if last is not None and len(raw) == last[0] and raw.startswith(last[1]) and raw.endswith(last[2]):
            return RawProperties(raw, last[3])
        shape = self._exact.get(raw)
        if shape is not None:
            return RawProperties(raw, shape)
        key = self._key
        at = raw.find(key) if key else -1
        if at >= 0:
            at += len(key) + 1  # the value, after the type octet
            fmt = _INTS.get(raw[at - 1]) if at <= len(raw) else None
            if fmt is not None and at + fmt.size <= len(raw):
                before, after = raw[:at], raw[at + fmt.size:]
                shape = self._masked.get(before + after)
                if shape is not None and shape.int is fmt:
                    self._last = (len(raw), before, after, shape)
                    return RawProperties(raw, shape)
                shape = self._learn(raw, at, fmt)
                if shape is not None:
                    if len(self._masked) >= CACHE_MAX:
                        self._masked.clear()
                    self._masked[before + after] = shape
                    self._last = (len(raw), before, after, shape)
                    return RawProperties(raw, shape)
        try:
            props = _decode(raw, 0, len(raw))
        except Exception:  # malformed: the general path reports it
            return None
        shape = PropertyShape(props, self.name)
        if len(self._exact) >= CACHE_MAX:
            self._exact.clear()
        self._exact[raw] = shape
        return RawProperties(raw, shape)

    def _learn(self, raw: bytes, at: int, fmt: struct.Struct) -> PropertyShape | None:
        """The shape of ``raw`` with its varying value at ``at``, if those bytes are the value of the
        header named so in the top-level table and nothing else (see the module's docstring)."""
        n = fmt.size
        other = (int.from_bytes(raw[at:at + n], "big") ^ ((1 << 8 * n) - 1)).to_bytes(n, "big")  # all differ
        try:
            one = _decode(raw, 0, len(raw))
            two = _decode(raw[:at] + other + raw[at + fmt.size:], 0, len(raw))
        except Exception:
            return None
        name = self.name
        h1, h2 = one.headers, two.headers
        if name is None or h1 is None or h2 is None or h1.get(name) != fmt.unpack_from(raw, at)[0] \
                or h2.get(name) != fmt.unpack(other)[0] or type(h1.get(name)) is not int:
            return None
        h2[name] = h1[name]
        if one != two:  # the bytes held more than that value
            return None
        return PropertyShape(one, name, at, fmt)


class PublishParsing:
    """A server connection's memory for parsing publishes: ``methods``, the decoded basic.publish
    fields (ticket, exchange, routing key, mandatory, immediate) by method payload (a producer sends
    the same one over and over; at most ``CACHE_MAX``), and ``shapes`` when it keeps properties as
    received (else None). One attribute of the connection for both: an idle connection's attribute
    dict stays in its smaller size."""

    __slots__ = ("methods", "shapes")

    def __init__(self, shapes: PropertyShapes | None) -> None:
        self.methods: dict[bytes, tuple[int, str, str, bool, bool]] = {}
        self.shapes = shapes
