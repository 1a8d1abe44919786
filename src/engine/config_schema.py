"""The config file's schema: every key known, typed and validated, errors naming key and line.

``load(path)`` reads a TOML file into an engine :class:`Config`; any problem is a
:class:`ConfigError` whose text is one line, e.g.::

    sansmq.toml:12: users.app.loopback_only: expected true or false, got the string "yes"

tomllib keeps no positions, so the line is found by a plain scan of the text for the key under
its ``[table]`` header (good enough for the flat files this schema allows).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Config, Limits, User

__all__ = ["ConfigError", "load", "from_mapping", "TOP_LEVEL_KEYS", "USER_KEYS", "LIMIT_KEYS", "WEBSOCKET_KEYS"]


class ConfigError(ValueError):
    """A config problem; ``str()`` is the one-line message for the operator."""

    def __init__(self, message: str, key: str = "", line: int | None = None, file: str = "") -> None:
        self.message, self.key, self.line, self.file = message, key, line, file
        where = f"{file}:{line}: " if file and line else f"{file}: " if file else ""
        super().__init__(f"{where}{key + ': ' if key else ''}{message}")


# -- value checkers: each returns the converted value or raises ConfigError(message) --------------
def _describe(value: Any) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "the string", list: "an array",
             dict: "a table"}
    kind = kinds.get(type(value), type(value).__name__)
    return f'{kind} "{value}"' if isinstance(value, str) else f"{kind} {value!r}" if not isinstance(
        value, (list, dict)) else kind


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"expected true or false, got {_describe(value)}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"expected a string, got {_describe(value)}")
    return value


def _str_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"expected an array of strings, got {_describe(value)}")
    return tuple(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"expected a non-negative integer, got {_describe(value)}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"expected a non-negative number, got {_describe(value)}")
    return value


#: RabbitMQ's size units: SI with a B (kB, MB, GB), binary without it or with iB (k, kiB, M, MiB...)
SIZE_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
              "K": 1024, "KIB": 1024, "M": 1024**2, "MIB": 1024**2, "G": 1024**3, "GIB": 1024**3, "TIB": 1024**4}


def parse_size(text: str) -> int:
    """``536870912``, ``512MiB``, ``1GB``, ``2G`` -> bytes; ValueError for anything else."""
    t = text.strip().upper()
    digits = t.rstrip("BKMGTI")
    if not digits.isdigit() or t[len(digits):] not in SIZE_UNITS:
        raise ValueError(f"bad size {text!r} (e.g. 1073741824, 512MiB, 2GB)")
    return int(digits) * SIZE_UNITS[t[len(digits):]]


def _size(value: Any) -> int:
    if isinstance(value, str):
        try:
            return parse_size(value)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return _count(value)


def _int_pair(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"expected an array of two integers, e.g. [10000, 10000], got {_describe(value)}")
    return (_count(value[0]), _count(value[1]))


Checker = Callable[[Any], Any]

TOP_LEVEL_KEYS: dict[str, Checker] = {
    "anonymous_user": _str,  # STOMP CONNECT without login logs in as this user ('' = refused, the default)
    "anonymous_password": _str,  # ... with this password (RabbitMQ's STOMP default_user / default_pass)
    "vhosts": _str_list,
    "default_vhost": _str,
    "trace_vhosts": _str_list,
    "event_vhost": _str,  # the vhost of the event exchange amq.rabbitmq.event ('' = off)
    "users": dict,  # checked per user below
    "limits": dict,  # checked per limit below
    "http": _str,  # management API listener, HOST:PORT ('' = off); --http overrides
    "prometheus": _str,  # Prometheus listener, HOST:PORT ('' = off); --prometheus overrides
    "https": _str,  # management API over TLS, HOST:PORT (off unless set); --https overrides
    "prometheus_https": _str,  # Prometheus over TLS, HOST:PORT (off unless set); --prometheus-https overrides
    "definitions": _str,
    "tls": dict,  # checked per key below
    # bytes or a size ("1GB"), or RabbitMQ's two forms as dotted keys: disk_free_limit.absolute = "2GB"
    # or disk_free_limit.relative = 1.5 (times the machine's memory)
    "disk_free_limit": lambda v: v if isinstance(v, dict) else _size(v),
    "websocket": dict,  # checked per key below
    "cluster": dict,  # checked per key below
}
DISK_FREE_KEYS: dict[str, Checker] = {"absolute": _size, "relative": _number}
CLUSTER_KEYS: dict[str, Checker] = {"node": _str, "address": _str, "lease": _number, "tls_cert": _str,
                                    "tls_key": _str, "tls_ca": _str}
TLS_KEYS: dict[str, Checker] = {"cert": _str, "key": _str, "ca": _str, "verify_peer": _bool}
WEBSOCKET_KEYS: dict[str, Checker] = {"allowed_origins": _str_list, "compress": _bool}
USER_KEYS: dict[str, Checker] = {"password": _str, "loopback_only": _bool, "vhosts": _str_list, "tags": _str_list}


def _limit_checker(default: Any) -> Checker:
    if isinstance(default, tuple):
        return _int_pair
    if isinstance(default, float):
        return _number
    return _count


LIMIT_KEYS: dict[str, Checker] = {
    f.name: _limit_checker(getattr(Limits(), f.name)) for f in dataclasses.fields(Limits)
}


def _check(checker: Checker, value: Any, key: str) -> Any:
    if checker is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"expected a table ([{key}]), got {_describe(value)}", key)
        return value
    try:
        return checker(value)
    except ConfigError as exc:
        raise ConfigError(exc.message, key) from None


def _unknown(key: str, known: dict[str, Any]) -> ConfigError:
    return ConfigError(f"unknown key (known here: {', '.join(known)})", key)


def from_mapping(data: dict[str, Any]) -> Config:
    """Validate a parsed config (a TOML document) and build the :class:`Config`."""
    for key, value in data.items():
        if key not in TOP_LEVEL_KEYS:
            raise _unknown(key, TOP_LEVEL_KEYS)
        _check(TOP_LEVEL_KEYS[key], value, key)
    cfg = Config()
    if "users" in data:
        cfg.users = {name: _user(name, spec) for name, spec in data["users"].items()}
    if "default_vhost" in data:
        cfg.default_vhost = _check(_str, data["default_vhost"], "default_vhost")
    cfg.vhosts = (cfg.default_vhost,)
    if "vhosts" in data:
        vhosts = _check(_str_list, data["vhosts"], "vhosts")
        cfg.vhosts = vhosts if cfg.default_vhost in vhosts else (cfg.default_vhost, *vhosts)
    if "trace_vhosts" in data:
        cfg.trace_vhosts = _check(_str_list, data["trace_vhosts"], "trace_vhosts")
        unknown = [name for name in cfg.trace_vhosts if name not in cfg.vhosts]
        if unknown:
            raise ConfigError(f"traced vhost '{unknown[0]}' is not one of vhosts {list(cfg.vhosts)}", "trace_vhosts")
    if "event_vhost" in data:
        cfg.event_vhost = _check(_str, data["event_vhost"], "event_vhost") or None
        if cfg.event_vhost is not None and cfg.event_vhost not in cfg.vhosts:
            raise ConfigError(f"event vhost '{cfg.event_vhost}' is not one of vhosts {list(cfg.vhosts)}",
                              "event_vhost")
    if "anonymous_user" in data:
        cfg.anonymous_user = _check(_str, data["anonymous_user"], "anonymous_user") or None
    if "anonymous_password" in data:
        cfg.anonymous_password = _check(_str, data["anonymous_password"], "anonymous_password")
    if cfg.anonymous_user is not None and not cfg.anonymous_password:
        # RabbitMQ's default_user always comes with default_pass: the anonymous path is a login
        raise ConfigError("anonymous_user needs anonymous_password (the password it logs in with)",
                          "anonymous_password" if "anonymous_password" in data else "anonymous_user")
    for key in ("http", "prometheus", "https", "prometheus_https"):
        if key in data:
            setattr(cfg, key, _check(_str, data[key], key))
    if "definitions" in data:
        cfg.definitions = data["definitions"] or None
    if "disk_free_limit" in data:
        _disk_free_limit(cfg, data["disk_free_limit"])
    for key, value in data.get("tls", {}).items():
        name = f"tls.{key}"
        if key not in TLS_KEYS:
            raise _unknown(name, TLS_KEYS)
        setattr(cfg.tls, key, _check(TLS_KEYS[key], value, name))
    for key, value in data.get("websocket", {}).items():
        name = f"websocket.{key}"
        if key not in WEBSOCKET_KEYS:
            raise _unknown(name, WEBSOCKET_KEYS)
        setattr(cfg.websocket, key, _check(WEBSOCKET_KEYS[key], value, name))
    for key, value in data.get("cluster", {}).items():
        name = f"cluster.{key}"
        if key not in CLUSTER_KEYS:
            raise _unknown(name, CLUSTER_KEYS)
        checked = _check(CLUSTER_KEYS[key], value, name)
        setattr(cfg.cluster, key, checked if key == "lease" else checked or None)
    for key, value in data.get("limits", {}).items():
        name = f"limits.{key}"
        if key not in LIMIT_KEYS:
            raise _unknown(name, LIMIT_KEYS)
        setattr(cfg.limits, key, _check(LIMIT_KEYS[key], value, name))
    return cfg


def _disk_free_limit(cfg: Config, value: Any) -> None:
    if not isinstance(value, dict):
        cfg.disk_free_limit = _size(value)
        return
    if len(value) != 1 or next(iter(value)) not in DISK_FREE_KEYS:
        raise ConfigError("expected one of disk_free_limit.absolute or disk_free_limit.relative", "disk_free_limit")
    key, given = next(iter(value.items()))
    checked = _check(DISK_FREE_KEYS[key], given, f"disk_free_limit.{key}")
    if key == "absolute":
        cfg.disk_free_limit = checked
    else:
        cfg.disk_free_limit_relative = float(checked)


def _user(name: str, spec: Any) -> User:
    where = f"users.{name}"
    if not isinstance(spec, dict):
        raise ConfigError(f"expected a table ([{where}]) with a password, got {_describe(spec)}", where)
    for key in spec:
        if key not in USER_KEYS:
            raise _unknown(f"{where}.{key}", USER_KEYS)
    if "password" not in spec:
        raise ConfigError("missing (every user needs a password)", f"{where}.password")
    fields = {key: _check(USER_KEYS[key], value, f"{where}.{key}") for key, value in spec.items()}
    if not fields["password"]:
        raise ConfigError("must not be blank (RabbitMQ refuses blank passwords)", f"{where}.password")
    # RabbitMQ's loopback_users default: guest stays loopback-only unless the file says otherwise
    return User(name, fields["password"], loopback_only=fields.get("loopback_only", name == "guest"),
                vhosts=fields.get("vhosts", ()), tags=fields.get("tags", ()))


# -- line numbers ------------------------------------------------------------------------------------
_HEADER_RE = re.compile(r"\[\[?\s*([^\]]+?)\s*\]\]?")
_KEY_RE = re.compile(r"""(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_.-]+))\s*=""")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in dotted.split("."))


def find_line(text: str, key: str) -> int | None:
    """The line of ``key`` (dotted, e.g. ``users.app.password``) or, failing that, of the nearest
    enclosing table or key that is written in the file."""
    want = _parts(key) if key else ()
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            m = _HEADER_RE.match(line)
            if m:
                table = _parts(m.group(1))
                found.setdefault(table, no)
            continue
        m = _KEY_RE.match(line)
        if m:
            name = m.group(1) if m.group(1) is not None else m.group(2) if m.group(2) is not None else m.group(3)
            found.setdefault(table + (_parts(name) if m.group(3) else (name,)), no)
    for n in range(len(want), 0, -1):
        if want[:n] in found:
            return found[want[:n]]
        inside = [no for k, no in found.items() if k[:n] == want[:n]]  # only its sub-tables are written
        if inside:
            return inside[0]
    return None


def load(path: str | Path) -> Config:
    """Read and validate a config file; every problem is one :class:`ConfigError` line."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", file=name) from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("not valid UTF-8 text", file=name) from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise ConfigError(f"invalid TOML: {str(exc).split(' (at line')[0]}",
                          line=int(m.group(1)) if m else None, file=name) from None
    try:
        return from_mapping(data)
    except ConfigError as exc:
        raise ConfigError(exc.message, exc.key, find_line(text, exc.key), name) from None
