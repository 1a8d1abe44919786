"""Users, password hashes and per-vhost permissions (RabbitMQ's internal auth backend).

A password is kept as RabbitMQ keeps it: ``base64(salt + H(salt + utf8(password)))`` with a 4-byte
salt, H being SHA-256 (``rabbit_password_hashing_sha256``, the default), SHA-512 or MD5 (accepted on
import). Salts come from the caller (the broker's injected rng): this module draws no randomness.

A permission is three regular expressions (configure, write, read) over resource names in one vhost,
matched as RabbitMQ matches them (``re:run``: a search, anchored only when the pattern says so; an
empty pattern matches nothing). Server-named queues (``amq.gen-*``) are checked like any other name.

State is durable through the store's documents (``Store.put_doc``): kind ``user`` keyed by name and
``permission`` keyed by ``["vhost", "user"]``, each a JSON object in the definitions file's own shape.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .._mypyc import mypyc_attr
from ..store import Store
from .errors import AccessRefused, NotFound, PreconditionFailed
from .objects import amqp_type_name
from .regex_guard import may_explode

__all__ = [
    "HASHING_ALGORITHMS", "DEFAULT_HASHING", "hash_password", "check_password", "UserRecord", "Permission",
    "Security", "Access", "UserAccess", "refused_text",
]

#: RabbitMQ's hashing module names -> hashlib constructors
HASHING_ALGORITHMS = {
    "rabbit_password_hashing_sha256": hashlib.sha256,
    "rabbit_password_hashing_sha512": hashlib.sha512,
    "rabbit_password_hashing_md5": hashlib.md5,
}
DEFAULT_HASHING = "rabbit_password_hashing_sha256"
Access = Literal["configure", "write", "read"]
USER_DOC, PERMISSION_DOC = "user", "permission"
TOPIC_PERMISSION_DOC = "topic_permission"
#: a config-file user once seeded into the store (later boots leave it to the stored state)
SEEDED_DOC = "seeded_user"


def hash_password(password: str, salt: bytes, algorithm: str = DEFAULT_HASHING) -> str:
    """RabbitMQ's ``password_hash`` of ``password`` with the 4-byte ``salt``."""
    digest = HASHING_ALGORITHMS[algorithm](salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password_hash: str, algorithm: str, password: str) -> bool:
    """Whether ``password`` matches ``password_hash`` (an empty hash matches nothing: RabbitMQ's
    passwordless users cannot log in with a password). A blank password never logs in, as
    RabbitMQ's internal backend refuses it whatever the stored hash."""
    return password != "" and _hash_matches(password_hash, algorithm, password)


def _hash_matches(password_hash: str, algorithm: str, password: str) -> bool:
    make = HASHING_ALGORITHMS.get(algorithm)
    if make is None or not password_hash:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(make(salt + password.encode("utf-8")).digest(), digest)


@dataclass(slots=True)
class UserRecord:
    name: str
    password_hash: str
    hashing_algorithm: str = DEFAULT_HASHING
    #: RabbitMQ's tags (administrator, monitoring, management, policymaker, ...)
    tags: tuple[str, ...] = ()

    def check(self, password: str) -> bool:
        return check_password(self.password_hash, self.hashing_algorithm, password)

    def has_blank_password(self) -> bool:
        return _hash_matches(self.password_hash, self.hashing_algorithm, "")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm, "tags": list(self.tags)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UserRecord:
        tags = d.get("tags", ())
        if isinstance(tags, str):  # RabbitMQ < 3.10 exports tags as one comma-separated string
            tags = [t for t in tags.split(",") if t]
        algorithm = d.get("hashing_algorithm") or DEFAULT_HASHING
        if algorithm not in HASHING_ALGORITHMS:
            raise PreconditionFailed(f"unsupported hashing algorithm '{algorithm}' for user '{d.get('name')}'")
        return cls(str(d["name"]), str(d.get("password_hash", "")), algorithm, tuple(str(t) for t in tags))


def _compile(pattern: str) -> re.Pattern[str] | None:
    """A permission pattern, compiled; refused (406) when invalid or when its matching time may
    explode (a repeat inside a repeat: Python's ``re`` has no time limit, unlike RabbitMQ's)."""
    if pattern == "":
        return None  # RabbitMQ: an empty pattern grants nothing
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise PreconditionFailed(f"invalid regular expression '{pattern}': {exc}") from None
    if may_explode(pattern):
        raise PreconditionFailed(f"regular expression '{pattern}' nests a repeat inside a repeat (or an "
                                 "alternation in one, or refers back to a group): its matching time can "
                                 "explode; write it without")
    return compiled


@dataclass(slots=True)
class Permission:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"
    _compiled: dict[str, re.Pattern[str] | None] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._compiled = {a: _compile(getattr(self, a)) for a in ("configure", "write", "read")}

    def allows(self, access: Access, resource: str) -> bool:
        rx = self._compiled[access]
        return rx is not None and rx.search(resource) is not None

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "vhost": self.vhost, "configure": self.configure, "write": self.write,
                "read": self.read}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Permission:
        return cls(str(d["user"]), str(d["vhost"]), str(d.get("configure", "")), str(d.get("write", "")),
                   str(d.get("read", "")))


TopicAccess = Literal["write", "read"]


@dataclass(slots=True)
class TopicPermission:
    """RabbitMQ's topic authorisation: which routing keys ``user`` may publish with (``write``) and
    bind with (``read``) on the topic exchange ``exchange`` of ``vhost``. Patterns are regular
    expressions searched in the routing key (an empty one: only the empty key, as RabbitMQ's
    ``^$``) after ``{username}``, ``{vhost}`` and ``{client_id}`` are replaced by the connection's."""

    user: str
    vhost: str
    exchange: str
    write: str = ".*"
    read: str = ".*"

    def __post_init__(self) -> None:
        for pattern in (self.write, self.read):
            _compile(pattern)  # a bad regular expression is refused when set, not when used

    def pattern(self, access: TopicAccess) -> str:
        """The pattern of ``access`` as written (variables not substituted yet)."""
        return (self.write if access == "write" else self.read) or "^$"

    def allows(self, access: TopicAccess, routing_key: str, variables: dict[str, str]) -> bool:
        """Whether ``routing_key`` passes ``access`` with these variables (connections go through
        ``UserAccess.topic_allows``, which keeps the compiled pattern)."""
        rx = _substituted(self.pattern(access), variables)
        return rx is not None and rx.search(routing_key) is not None

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "vhost": self.vhost, "exchange": self.exchange, "write": self.write,
                "read": self.read}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicPermission:
        return cls(str(d["user"]), str(d["vhost"]), str(d["exchange"]), str(d.get("write", "")),
                   str(d.get("read", "")))


class Security:
    """The user database and permissions, written through to the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.users: dict[str, UserRecord] = {}
        #: (vhost, user) -> permission
        self.permissions: dict[tuple[str, str], Permission] = {}
        #: users that may connect only from a loopback address (RabbitMQ's ``loopback_users``)
        self.loopback_users: set[str] = {"guest"}
        #: bumped on every permission change (sessions' cached answers are dropped then)
        self.version = 0
        #: (vhost, user, exchange) -> topic permission (RabbitMQ's topic authorisation)
        self.topic_permissions: dict[tuple[str, str, str], TopicPermission] = {}
        #: config-file users seeded into the store at an earlier boot (``seed``)
        self.seeded: set[str] = set()

    # -- users ---------------------------------------------------------------------------------
    def put_user(self, user: UserRecord, persist: bool = True) -> UserRecord:
        self.users[user.name] = user
        if persist:
            self.store.put_doc(USER_DOC, user.name, json.dumps(user.to_json()))
        return user

    def add_user(self, name: str, password: str | None, salt: bytes, tags: tuple[str, ...] = ()) -> UserRecord:
        """Create or replace ``name``; a None password makes a user that cannot log in by password.
        A blank one is refused (RabbitMQ refuses blank passwords)."""
        if password == "":
            raise PreconditionFailed(f"user '{name}': a password must not be blank")
        phash = "" if password is None else hash_password(password, salt)
        return self.put_user(UserRecord(name, phash, DEFAULT_HASHING, tuple(tags)))

    def delete_user(self, name: str) -> None:
        if self.users.pop(name, None) is None:
            raise NotFound(f"no user '{name}'")
        self.store.delete_doc(USER_DOC, name)
        for vhost, user in [k for k in self.permissions if k[1] == name]:
            self.clear_permissions(user, vhost)
        for vhost, user, exchange in [k for k in self.topic_permissions if k[1] == name]:
            self.clear_topic_permission(user, vhost, exchange)

    def authenticate(self, name: str, password: str) -> UserRecord | None:
        user = self.users.get(name)
        return user if user is not None and user.check(password) else None

    # -- permissions ---------------------------------------------------------------------------
    def set_permissions(self, perm: Permission, persist: bool = True) -> Permission:
        self.permissions[(perm.vhost, perm.user)] = perm
        self.version += 1
        if persist:
            self.store.put_doc(PERMISSION_DOC, _perm_key(perm.vhost, perm.user), json.dumps(perm.to_json()))
        return perm

    def clear_permissions(self, user: str, vhost: str) -> None:
        if self.permissions.pop((vhost, user), None) is not None:
            self.version += 1
            self.store.delete_doc(PERMISSION_DOC, _perm_key(vhost, user))

    def forget_vhost(self, vhost: str) -> None:
        """A vhost was deleted: its permissions go with it (as RabbitMQ's)."""
        for v, user in [k for k in self.permissions if k[0] == vhost]:
            self.clear_permissions(user, v)
        for v, user, exchange in [k for k in self.topic_permissions if k[0] == vhost]:
            self.clear_topic_permission(user, v, exchange)

    def set_topic_permission(self, perm: TopicPermission, persist: bool = True) -> TopicPermission:
        self.topic_permissions[(perm.vhost, perm.user, perm.exchange)] = perm
        self.version += 1
        if persist:
            self.store.put_doc(TOPIC_PERMISSION_DOC, json.dumps([perm.vhost, perm.user, perm.exchange]),
                               json.dumps(perm.to_json()))
        return perm

    def clear_topic_permission(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """Drop ``user``'s topic permission on ``exchange`` in ``vhost`` (every exchange when None)."""
        for key in [k for k in self.topic_permissions if k[:2] == (vhost, user) and exchange in (None, k[2])]:
            del self.topic_permissions[key]
            self.version += 1
            self.store.delete_doc(TOPIC_PERMISSION_DOC, json.dumps(list(key)))

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((vhost, user))

    def can_access_vhost(self, user: str, vhost: str) -> bool:
        """RabbitMQ lets a user open a vhost when it has any permission entry there."""
        return (vhost, user) in self.permissions

    def allows(self, user: str, vhost: str, access: Access, resource: str) -> bool:
        perm = self.permissions.get((vhost, user))
        return perm is not None and perm.allows(access, resource)

    # -- recovery --------------------------------------------------------------------------------
    def restore(self, docs: dict[tuple[str, str], str]) -> None:
        for (kind, key), doc in docs.items():
            if kind == USER_DOC:
                self.put_user(UserRecord.from_json(json.loads(doc)), persist=False)
            elif kind == PERMISSION_DOC:
                self.set_permissions(Permission.from_json(json.loads(doc)), persist=False)
            elif kind == TOPIC_PERMISSION_DOC:
                self.set_topic_permission(TopicPermission.from_json(json.loads(doc)), persist=False)
            elif kind == SEEDED_DOC:
                self.seeded.add(key)

    def seed(self, user: UserRecord, vhosts: tuple[str, ...]) -> bool:
        """A config-file user with full permissions on ``vhosts``, written to the store the first
        time only: as RabbitMQ's default user seeds a blank database, afterwards the stored state
        wins (a user deleted or changed through the API stays so).
        False when it was seeded before (or the store already had it)."""
        if user.name in self.seeded:
            return False
        self.seeded.add(user.name)
        self.store.put_doc(SEEDED_DOC, user.name, "1")
        if user.name in self.users:
            return False
        self.put_user(user)
        for vhost in vhosts:
            if self.permission(user.name, vhost) is None:
                self.set_permissions(Permission(user.name, vhost))
        return True


#: answers one connection keeps (the resources a connection uses again and again are few)
_CACHE_SIZE = 64


@mypyc_attr(allow_interpreted_subclasses=True)  # the cluster link's peer access extends it
class UserAccess:
    """One connection's view of its user's permissions in its vhost, with the answers cached (a
    publish asks for the same exchange again and again; a permission change drops the cache)."""

    __slots__ = ("security", "user", "vhost", "_cache", "_version", "client_id", "_topic_rx")

    def __init__(self, security: Security, user: str, vhost: str, client_id: str | None = None) -> None:
        self.security = security
        self.user = user
        self.vhost = vhost
        self.client_id = client_id
        self._cache: dict[tuple[str, str], bool] = {}
        self._version = security.version
        #: topic permission pattern as written -> compiled with this connection's variables; None
        #: until the first topic permission check (most connections never make one)
        self._topic_rx: dict[str, re.Pattern[str] | None] | None = None

    @property
    def variables(self) -> dict[str, str]:
        """What topic permission patterns may name (RabbitMQ's variable map)."""
        out = {"username": self.user, "vhost": self.vhost}
        if self.client_id is not None:
            out["client_id"] = self.client_id
        return out

    def allows(self, access: Access, resource: str) -> bool:
        sec = self.security
        if sec.version != self._version:
            self._cache.clear()
            self._version = sec.version
        key = (access, resource)
        ok = self._cache.get(key)
        if ok is None:
            if len(self._cache) >= _CACHE_SIZE:  # bounded: a client naming many queues pins nothing
                self._cache.clear()
            ok = self._cache[key] = sec.allows(self.user, self.vhost, access, resource)
        return ok

    def topic_allows(self, perm: TopicPermission, access: TopicAccess, routing_key: str) -> bool:
        """``perm``'s ``access`` pattern, with ``{username}``, ``{vhost}``, ``{client_id}`` replaced
        by this connection's values taken literally (escaped, as RabbitMQ substitutes them: a
        client_id of ``(a+)+$`` is those six characters, never a regex), searched in ``routing_key``.
        Compiled once per connection and pattern (bounded)."""
        pattern = perm.pattern(access)
        cache = self._topic_rx
        if cache is None:
            cache = self._topic_rx = {}
        if pattern in cache:
            rx = cache[pattern]
        else:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            rx = cache[pattern] = _substituted(pattern, self.variables)
        return rx is not None and rx.search(routing_key) is not None

    def refusal(self, access: Access, kind: str, name: str) -> str | None:
        """None when ``access`` to the ``kind`` (queue, exchange) ``name`` is allowed, else RabbitMQ's
        refusal text. The default exchange is the resource ``amq.default``."""
        if kind == "exchange" and name == "":
            name = "amq.default"
        if self.allows(access, name):
            return None
        return refused_text(kind, name, self.vhost, self.user)


def _substituted(pattern: str, variables: dict[str, str]) -> re.Pattern[str] | None:
    """``pattern`` with its variables replaced by their escaped values, compiled; None (nothing
    matches) when a variable the pattern names is missing and so leaves it invalid."""
    if "{" in pattern:
        for name, value in variables.items():
            pattern = pattern.replace("{" + name + "}", re.escape(value))
    try:
        return re.compile(pattern)
    except re.error:
        return None


def client_id_of(client_properties: dict[str, Any] | None) -> str | None:
    """The ``client_id`` an AMQP client names in its client properties (topic permissions'
    ``{client_id}``), or None."""
    value = (client_properties or {}).get("client_id")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def topic_refusal(access: UserAccess, exchange: Any, routing_key: str, want: TopicAccess) -> str | None:
    """RabbitMQ's topic authorisation, for a publish (``write``) or a bind/unbind (``read``) with
    ``routing_key`` on ``exchange`` (an Exchange, or None when there is none): only topic exchanges,
    and only where the user has a topic permission for that exchange (none: allowed). None when
    allowed, else RabbitMQ's refusal text."""
    perms = access.security.topic_permissions
    if not perms or exchange is None or exchange.type != "topic":
        return None
    perm = perms.get((access.vhost, access.user, exchange.name))
    if perm is None or access.topic_allows(perm, want, routing_key):
        return None
    return (f"access to topic '{routing_key}' in exchange '{exchange.name}' in vhost '{access.vhost}' refused "
            f"for user '{access.user}'")


def check_topic_access(access: UserAccess, exchange: Any, routing_key: str, want: TopicAccess) -> None:
    """``topic_refusal`` as an AccessRefused (AMQP: 403 on the channel; the API: 401)."""
    text = topic_refusal(access, exchange, routing_key, want)
    if text is not None:
        raise AccessRefused(text)


#: the declare argument naming the exchange a new object will publish to: its alternate exchange,
#: its dead-letter exchange (RabbitMQ's channel checks these on exchange.declare / queue.declare)
TARGET_EXCHANGE_ARG = {"exchange": "alternate-exchange", "queue": "x-dead-letter-exchange"}


def check_target_exchange(access: UserAccess, kind: str, name: str, args: dict[str, Any] | None) -> None:
    """Before declaring a new ``kind`` (exchange, queue) ``name`` whose ``args`` name an exchange it
    will publish to: as rabbit_channel, a value that is not a string is 406, and the user needs read
    on the new object and write on that exchange (403 with RabbitMQ's text). Redeclaring an existing
    object checks nothing of this."""
    key = TARGET_EXCHANGE_ARG[kind]
    if not args or key not in args:
        return
    target = args[key]
    if isinstance(target, bytes):
        target = target.decode("utf-8", "replace")
    if not isinstance(target, str):
        raise PreconditionFailed(f"invalid type '{amqp_type_name(target)}' for arg '{key}' in {kind} '{name}' "
                                 f"in vhost '{access.vhost}'")
    for want, what, resource in (("read", kind, name), ("write", "exchange", target)):
        text = access.refusal(want, what, resource)  # type: ignore[arg-type]
        if text is not None:
            raise AccessRefused(text)


def _perm_key(vhost: str, user: str) -> str:
    return json.dumps([vhost, user])


def refused_text(kind: str, name: str, vhost: str, user: str) -> str:
    """RabbitMQ's text for a refused resource access (rabbit_access_control)."""
    return f"access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"
