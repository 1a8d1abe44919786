#!/usr/bin/env python3
"""Generate ``src/amqpproto/spec.py`` from the AMQP 0-9-1 spec files.

Usage: ``python tools/gen_amqp_spec.py [SPEC_DIR] [-o OUTPUT] [--check]``

SPEC_DIR defaults to ``../shared/specs`` relative to the repository root. It must hold
``amqp-rabbitmq-0.9.1.json`` (RabbitMQ's machine-readable spec: the wire authority, including
connection.update-secret and the access class) and ``amqp0-9-1.extended.xml`` (who may send each
method -- the ``chassis`` elements -- the synchronous replies and the one-line labels). The two are
cross-checked: a field whose wire type differs between them aborts generation.

The output has one dataclass per method with straight-line encode/decode functions (fixed-size
fields coalesced into one precompiled ``struct`` per run), the reply-code constants and
``BasicProperties`` with its 14 flags. ``--check`` exits 1 when the committed module differs.
"""

from __future__ import annotations

import argparse
import json
import keyword
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPECS = ROOT.parent / "shared" / "specs"
DEFAULT_OUT = ROOT / "src" / "amqpproto" / "spec.py"
JSON_NAME = "amqp-rabbitmq-0.9.1.json"
XML_NAME = "amqp0-9-1.extended.xml"

# Methods RabbitMQ added after the XML was written (or the deprecated access class the XML
# dropped): who sends them, as RabbitMQ's broker implements them.
SENDER_OVERRIDES = {
    "connection.update-secret": ("client",),
    "connection.update-secret-ok": ("server",),
    "access.request": ("client",),
    "access.request-ok": ("server",),
}
RESPONSE_OVERRIDES = {
    "connection.update-secret": ("update-secret-ok",),
    "access.request": ("request-ok",),
    "basic.recover": ("recover-ok",),  # the XML omits it; RabbitMQ replies recover-ok
}

FIXED = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
PYTYPE = {
    "octet": "int", "short": "int", "long": "int", "longlong": "int", "timestamp": "datetime | int",
    "bit": "bool", "shortstr": "str", "longstr": "bytes", "table": "dict[str, Any]",
}
ZERO = {"octet": "0", "short": "0", "long": "0", "longlong": "0", "bit": "False",
        "shortstr": "''", "longstr": "b''"}


def pyname(name: str) -> str:
    n = name.replace("-", "_")
    return n + "_" if keyword.iskeyword(n) else n


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def load(spec_dir: Path) -> tuple[dict, ET.Element]:
    with open(spec_dir / JSON_NAME, encoding="utf-8") as f:
        spec = json.load(f)
    return spec, ET.parse(spec_dir / XML_NAME).getroot()


def resolve(arg: dict, domains: dict[str, str]) -> str:
    t = arg.get("type") or arg["domain"]
    while t in domains and domains[t] != t:
        t = domains[t]
    return t


class Method:
    def __init__(self, cls: dict, m: dict, domains: dict, xml_m: ET.Element | None) -> None:
        self.cls_name = cls["name"]
        self.name = m["name"]
        self.full = f"{self.cls_name}.{self.name}"
        self.class_id = cls["id"]
        self.method_id = m["id"]
        self.pyclass = camel(self.cls_name) + camel(self.name)
        self.synchronous = bool(m.get("synchronous"))
        self.content = bool(m.get("content"))
        self.fields = [(pyname(a["name"]), resolve(a, domains), a.get("default-value"))
                       for a in m["arguments"]]
        if xml_m is not None:
            chassis = {c.get("name") for c in xml_m.findall("chassis")}
            # chassis "server" = the server implements (receives) it = the client sends it.
            self.senders = tuple(sorted({"client" if c == "server" else "server" for c in chassis}))
            self.responses = tuple(r.get("name") for r in xml_m.findall("response"))
            self.label = xml_m.get("label") or ""
        else:
            self.senders = SENDER_OVERRIDES[self.full]
            self.responses = ()
            self.label = ""
        self.senders = SENDER_OVERRIDES.get(self.full, self.senders)
        self.responses = RESPONSE_OVERRIDES.get(self.full, self.responses)
        if not self.label:
            self.label = self.full


def xml_index(root: ET.Element) -> tuple[dict, dict[str, str]]:
    domains = {d.get("name"): d.get("type") for d in root.findall("domain")}
    methods = {}
    for c in root.findall("class"):
        for m in c.findall("method"):
            methods[f"{c.get('name')}.{m.get('name')}"] = m
    return methods, domains


def cross_check(meth: Method, xml_m: ET.Element | None, xml_domains: dict[str, str]) -> None:
    if xml_m is None:
        return
    xml_types = []
    for f in xml_m.findall("field"):
        t = f.get("type") or f.get("domain")
        while t in xml_domains and xml_domains[t] != t:
            t = xml_domains[t]
        xml_types.append(t)
    ours = [t for _, t, _ in meth.fields]
    if xml_types != ours:
        raise SystemExit(f"spec mismatch for {meth.full}: json {ours} vs xml {xml_types}")
    if int(xml_m.get("index")) != meth.method_id:
        raise SystemExit(f"spec mismatch for {meth.full}: method id")


def runs(fields: list[tuple[str, str, object]]) -> list[tuple[str, list]]:
    """Group fields into ('fixed', [(name, type, bitpos)...]) runs and single variable fields."""
    out: list[tuple[str, list]] = []
    cur: list = []
    bitbyte: list | None = None
    for name, t, _ in fields:
        if t == "bit":
            if bitbyte is None or len(bitbyte) == 8:
                bitbyte = []
                cur.append(("<bits>", bitbyte))
            bitbyte.append(name)
            continue
        bitbyte = None
        if t in FIXED:
            cur.append((name, t))
        else:
            if cur:
                out.append(("fixed", cur))
                cur = []
            out.append((t, [name]))
    if cur:
        out.append(("fixed", cur))
    return out


def fmt_of(run: list) -> str:
    return ">" + "".join("B" if n == "<bits>" else FIXED[t] for n, t in run)


def default_of(t: str, dv: object) -> str:
    if t == "table":
        return "field(default_factory=dict)"
    if dv is None:
        return ZERO[t]
    if t == "longstr":
        return repr(str(dv).encode())
    if t == "bit":
        return repr(bool(dv))
    return repr(dv)


class Gen:
    def __init__(self) -> None:
        self.structs: dict[str, str] = {}
        self.out: list[str] = []

    def struct_name(self, fmt: str) -> str:
        if fmt not in self.structs:
            self.structs[fmt] = "_S_" + fmt[1:]
        return self.structs[fmt]

    def w(self, line: str = "") -> None:
        self.out.append(line)

    def decoder(self, m: Method) -> None:
        args = []
        self.w(f"def _decode_{m.pyclass}(b: bytes, ch: int) -> {m.pyclass}:")
        self.w("    o = 4")
        for kind, items in runs(m.fields):
            if kind == "fixed":
                fmt = fmt_of(items)
                names = []
                for n, _t in items:
                    names.append("_bits" + str(len(names)) if n == "<bits>" else n)
                self.w(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = "
                       f"{self.struct_name(fmt)}.unpack_from(b, o)")
                self.w(f"    o += {struct.calcsize(fmt)}")
                for (n, t), local in zip(items, names, strict=True):
                    if n == "<bits>":
                        for i, bn in enumerate(t):
                            self.w(f"    {bn} = bool({local} & {1 << i})")
                    elif t == "timestamp":
                        self.w(f"    {n} = _from_ts({n})")
                for n, t in items:
                    args.extend(t if n == "<bits>" else [n])
            else:
                n = items[0]
                args.append(n)
                if kind == "shortstr":
                    self.w("    n = b[o]; o += 1 + n")
                    self.w(f"    {n} = b[o - n:o].decode('utf-8', 'surrogateescape')")
                elif kind == "longstr":
                    self.w("    n, = _S_I.unpack_from(b, o); o += 4 + n")
                    self.w(f"    {n} = b[o - n:o]")
                elif kind == "table":
                    self.w(f"    {n}, o = read_table(b, o)")
                else:
                    raise SystemExit(f"unknown type {kind}")
        self.w("    if o != len(b):")
        self.w(f"        raise ValueError('{m.full}: {{}} bytes left over'.format(len(b) - o))")
        # content methods get their properties/body from the frames that follow
        extra = ["ch"] if not m.content else ["_PENDING_PROPERTIES", "b''", "ch"]
        self.w(f"    return {m.pyclass}({', '.join(args + extra)})")
        self.w()

    def encoder(self, m: Method) -> None:
        self.w(f"def _encode_{m.pyclass}(m: {m.pyclass}) -> bytes:")
        head = struct.pack(">HH", m.class_id, m.method_id)
        parts = [repr(head)]
        for kind, items in runs(m.fields):
            if kind == "fixed":
                vals = []
                for n, t in items:
                    if n == "<bits>":
                        vals.append("(" + " | ".join(
                            f"({1 << i} if m.{bn} else 0)" for i, bn in enumerate(t)) + ")")
                    elif t == "timestamp":
                        vals.append(f"_to_ts(m.{n})")
                    else:
                        vals.append(f"m.{n}")
                parts.append(f"{self.struct_name(fmt_of(items))}.pack({', '.join(vals)})")
            else:
                n = items[0]
                if kind == "shortstr":
                    self.w(f"    {n} = m.{n}.encode('utf-8', 'surrogateescape')")
                    parts.append(f"bytes((len({n}),))")
                    parts.append(n)
                elif kind == "longstr":
                    self.w(f"    {n} = _as_bytes(m.{n})")
                    parts.append(f"_S_I.pack(len({n}))")
                    parts.append(n)
                elif kind == "table":
                    parts.append(f"write_table(m.{n})")
        if len(parts) == 1:
            self.w(f"    return {parts[0]}")
        else:
            self.w(f"    return b''.join(({', '.join(parts)}))")
        self.w()

    def properties(self, props: list[tuple[str, str]]) -> None:
        self.w("@dataclass(slots=True)")
        self.w("class BasicProperties:")
        self.w('    """The 14 basic content properties; None means absent (flag bit clear)."""')
        self.w()
        for n, t in props:
            self.w(f"    {n}: {PYTYPE[t]} | None = None")
        self.w()
        self.w()
        self.w("# Content methods leave the decoder with this shared placeholder; the content header that")
        self.w("# must follow replaces it before the event is handed out.")
        self.w("_PENDING_PROPERTIES = BasicProperties()")
        self.w("PROPERTY_TYPES: dict[str, str] = {")
        for n, t in props:
            self.w(f"    {n!r}: {t!r},")
        self.w("}")
        self.w("PROPERTY_FLAGS: dict[str, int] = {")
        for i, (n, _) in enumerate(props):
            self.w(f"    {n!r}: 0x{1 << (15 - i):04X},")
        self.w("}")
        self.w()
        self.w()
        # decode: straight-line flag tests
        self.w("def decode_properties(b: bytes, o: int, end: int) -> BasicProperties:")
        self.w('    """Decode the property list at b[o:end] (o points at the flag word)."""')
        self.w("    flags, = _S_H.unpack_from(b, o)")
        self.w("    o += 2")
        self.w("    if flags & 1:")
        self.w("        raise ValueError('property flag continuation is not used by basic')")
        self.w("    if not flags:")
        self.w("        if o != end:")
        self.w("            raise ValueError('trailing bytes after properties')")
        self.w("        return BasicProperties()")
        names = [n for n, _ in props]
        for n, t in props:
            self.w(f"    {n}: {PYTYPE[t]} | None = None")
        for i, (n, t) in enumerate(props):
            bit = 1 << (15 - i)
            self.w(f"    if flags & 0x{bit:04X}:")
            if t == "shortstr":
                self.w("        n = b[o]; o += 1 + n")
                self.w(f"        {n} = b[o - n:o].decode('utf-8', 'surrogateescape')")
            elif t == "octet":
                self.w(f"        {n} = b[o]; o += 1")
            elif t == "timestamp":
                self.w(f"        {n} = _from_ts(_S_Q.unpack_from(b, o)[0]); o += 8")
            elif t == "table":
                self.w(f"        {n}, o = read_table(b, o)")
            else:
                raise SystemExit(f"property type {t}")
        self.w("    if o != end:")
        self.w("        raise ValueError('properties do not fill the header frame')")
        self.w(f"    return BasicProperties({', '.join(names)})")
        self.w()
        self.w()
        self.w("def encode_properties(p: BasicProperties) -> bytes:")
        self.w('    """Encode flag word + present properties."""')
        self.w("    flags = 0")
        self.w("    parts = [b'']")
        for i, (n, t) in enumerate(props):
            bit = 1 << (15 - i)
            self.w(f"    {n} = p.{n}")
            self.w(f"    if {n} is not None:")
            self.w(f"        flags |= 0x{bit:04X}")
            if t == "shortstr":
                self.w(f"        e = {n}.encode('utf-8', 'surrogateescape')")
                self.w("        parts.append(bytes((len(e),)))")
                self.w("        parts.append(e)")
            elif t == "octet":
                self.w(f"        parts.append(bytes(({n},)))")
            elif t == "timestamp":
                self.w(f"        parts.append(_S_Q.pack(_to_ts({n})))")
            elif t == "table":
                self.w(f"        parts.append(write_table({n}))")
        self.w("    parts[0] = _S_H.pack(flags)")
        self.w("    return b''.join(parts)")
        self.w()
        self.w()


def generate(spec_dir: Path) -> str:
    spec, root = load(spec_dir)
    xml_methods, xml_domains = xml_index(root)
    domains = {d[0]: d[1] for d in spec["domains"]}
    methods: list[Method] = []
    props: list[tuple[str, str]] = []
    for cls in spec["classes"]:
        for m in cls["methods"]:
            xm = xml_methods.get(f"{cls['name']}.{m['name']}")
            meth = Method(cls, m, domains, xm)
            cross_check(meth, xm, xml_domains)
            methods.append(meth)
        if cls.get("properties"):
            if cls["name"] != "basic":
                raise SystemExit("only basic content is supported")
            props = [(pyname(p["name"]), resolve(p, domains)) for p in cls["properties"]]
    if len(props) != 14:
        raise SystemExit(f"expected 14 basic properties, got {len(props)}")

    g = Gen()
    w = g.w
    w("# Generated by tools/gen_amqp_spec.py from amqp-rabbitmq-0.9.1.json and")
    w("# amqp0-9-1.extended.xml -- do not edit. Regenerate: python tools/gen_amqp_spec.py")
    w('"""AMQP 0-9-1 (+ RabbitMQ extensions): constants, method events, basic properties, codecs.')
    w()
    w("Every method is a slotted dataclass whose last field is ``channel``; content-bearing")
    w("methods (basic.publish/return/deliver/get-ok) also carry ``properties`` and ``body``, so a")
    w("whole message is one object on both the receive and the send path.")
    w('"""')
    w()
    w("from __future__ import annotations")
    w()
    w("import struct")
    w("from collections.abc import Callable")
    w("from dataclasses import dataclass, field")
    w("from datetime import datetime")
    w("from typing import Any, TypeAlias")
    w()
    w("from ._event_base import MethodBase, set_constants")
    w("from ._readers import from_timestamp as _from_ts")
    w("from ._readers import read_table")
    w("from ._writers import as_bytes as _as_bytes")
    w("from ._writers import to_timestamp as _to_ts")
    w("from ._writers import write_table")
    w()
    w(f"PROTOCOL_HEADER = b'AMQP\\x00\\x{spec['major-version']:02x}\\x{spec['minor-version']:02x}"
      f"\\x{spec['revision']:02x}'")
    w(f"PORT = {spec['port']}")
    w()
    soft, hard, codes = [], [], []
    for c in spec["constants"]:
        cname = pyname(c["name"]).upper()
        w(f"{cname} = {c['value']}")
        if c.get("class") == "soft-error":
            soft.append(cname)
        elif c.get("class") == "hard-error":
            hard.append(cname)
        if c["name"].startswith("REPLY-") or c.get("class"):
            codes.append(cname)
    w()
    w(f"SOFT_ERRORS = frozenset({{{', '.join(soft)}}})")
    w(f"HARD_ERRORS = frozenset({{{', '.join(hard)}}})")
    w("REPLY_NAMES: dict[int, str] = {")
    for cname in codes:
        w(f"    {cname}: {cname!r},")
    w("}")
    w()
    w("# Wire structs for fixed-size field runs.")
    struct_slot = len(g.out)
    w()
    g.properties(props)

    for m in methods:
        w("@dataclass(slots=True)")
        w(f"class {m.pyclass}(MethodBase):")
        w(f'    """{m.label} ({m.full}, {m.class_id}/{m.method_id})."""')
        w()
        for n, t, dv in m.fields:
            w(f"    {n}: {PYTYPE[t]} = {default_of(t, dv)}")
        if m.content:
            w("    properties: Any = field(default_factory=BasicProperties)  # or pre-encoded bytes, or None")
            w("    body: bytes = b''")
        w("    channel: int = 0")
        w()
        w()
        ftuple = "".join(f"({n!r}, {t!r}), " for n, t, _ in m.fields)
        w(f"set_constants({m.pyclass}, {m.class_id}, {m.method_id}, {m.full!r}, {m.synchronous}, {m.content}, "
          f"{'client' in m.senders}, {'server' in m.senders}, ({ftuple}))")
        w()
        w()
    for m in methods:
        g.decoder(m)
        w()
        g.encoder(m)
        w()
    names = [m.pyclass for m in methods]
    w("# Every method class: the type of a method event (narrow it with isinstance or match).")
    w("Method: TypeAlias = (")
    w(f"    {names[0]}")
    for n in names[1:]:
        w(f"    | {n}")
    w(")")
    w("METHODS: dict[int, type[Method]] = {")
    for n in names:
        w(f"    {n}.INDEX: {n},")
    w("}")
    w("DECODERS: dict[int, Callable[[bytes, int], Method]] = {")
    for n in names:
        w(f"    {n}.INDEX: _decode_{n},")
    w("}")
    w("ENCODERS: dict[type, Callable[[Any], bytes]] = {")
    for n in names:
        w(f"    {n}: _encode_{n},")
    w("}")
    by_name = {m.full: m for m in methods}
    w("# Synchronous requests and the replies that complete them.")
    w("RESPONSES: dict[type, tuple[type, ...]] = {")
    for m in methods:
        if m.responses:
            reps = ", ".join(by_name[f"{m.cls_name}.{r}"].pyclass for r in m.responses)
            w(f"    {m.pyclass}: ({reps},),")
    w("}")
    w()
    w("__all__ = [")
    w("    'BasicProperties', 'PROPERTY_FLAGS', 'PROPERTY_TYPES', 'METHODS', 'DECODERS',")
    w("    'ENCODERS', 'RESPONSES', 'Method',")
    w("    'decode_properties', 'encode_properties', 'SOFT_ERRORS', 'HARD_ERRORS', 'REPLY_NAMES',")
    w("    'PROTOCOL_HEADER', 'PORT',")
    for n in names:
        w(f"    {n!r},")
    for c in spec["constants"]:
        w(f"    {pyname(c['name']).upper()!r},")
    w("]")
    structs = ["_S_H = struct.Struct('>H')", "_S_I = struct.Struct('>I')",
               "_S_Q = struct.Struct('>Q')"]
    for fmt, sname in sorted(g.structs.items(), key=lambda kv: kv[1]):
        if sname not in ("_S_H", "_S_I", "_S_Q"):
            structs.append(f"{sname} = struct.Struct({fmt!r})")
    g.out[struct_slot:struct_slot] = structs
    return "\n".join(g.out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec_dir", nargs="?", type=Path, default=DEFAULT_SPECS)
    ap.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the output is stale")
    args = ap.parse_args(argv)
    text = generate(args.spec_dir)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale; run tools/gen_amqp_spec.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
