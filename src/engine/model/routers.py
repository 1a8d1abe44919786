"""Exchange routers: direct, fanout, topic (a word trie plus ocamlmq-style prefixes) and headers.

A router maps a routing key (and message headers) to destinations: queues or exchanges. Results
are dicts used as ordered sets, so routing order follows binding insertion order and never hash
order. Routers know nothing of STOMP or AMQP.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

__all__ = [
    "Router",
    "DirectRouter",
    "FanoutRouter",
    "TopicRouter",
    "HeadersRouter",
    "ROUTER_TYPES",
    "PartitionRouter",
    "PARTITION_ARG",
    "DELAYED_TYPE",
    "router_for",
    "PREFIX_ARG",
]

#: binding argument that turns a topic binding key into a plain string prefix (``/topic/foo*``)
PREFIX_ARG = "x-sansmq-prefix"

ArgsKey = tuple[tuple[str, Any], ...]


def args_key(args: dict[str, Any] | None) -> ArgsKey:
    """A hashable, order-independent identity for binding arguments."""
    if not args:
        return ()
    return tuple(sorted((k, v if isinstance(v, (str, int, float, bool)) else repr(v)) for k, v in args.items()))


class Router:
    """Base: keeps the binding list (for listing/removal); subclasses index it for routing."""

    __slots__ = ("_bindings",)

    def __init__(self) -> None:
        # (dest, key, args_key) -> args; insertion ordered
        self._bindings: dict[tuple[Any, str, ArgsKey], dict[str, Any] | None] = {}

    def __len__(self) -> int:
        return len(self._bindings)

    def bindings(self) -> Iterable[tuple[Any, str, dict[str, Any] | None]]:
        for (dest, key, _), args in self._bindings.items():
            yield dest, key, args

    def has(self, dest: Any, key: str, args: dict[str, Any] | None = None) -> bool:
        return (dest, key, args_key(args)) in self._bindings

    def add(self, dest: Any, key: str, args: dict[str, Any] | None = None) -> bool:
        ident = (dest, key, args_key(args))
        if ident in self._bindings:
            return False
        self._bindings[ident] = args
        self._index(dest, key, args)
        return True

    def remove(self, dest: Any, key: str, args: dict[str, Any] | None = None) -> bool:
        ident = (dest, key, args_key(args))
        if ident not in self._bindings:
            return False
        del self._bindings[ident]
        self._unindex(dest, key, args)
        return True

    def remove_dest(self, dest: Any) -> list[tuple[str, dict[str, Any] | None]]:
        """Drop every binding to ``dest``; returns what was removed."""
        gone = [(k, a) for (d, k, _), a in self._bindings.items() if d is dest]
        for key, args in gone:
            self.remove(dest, key, args)
        return gone

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        raise NotImplementedError

    def _index(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        pass

    def _unindex(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        pass


class DirectRouter(Router):
    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        super().__init__()
        self._by_key: dict[str, dict[Any, int]] = {}

    def _index(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        dests = self._by_key.setdefault(key, {})
        dests[dest] = dests.get(dest, 0) + 1  # same dest may be bound twice with different args

    def _unindex(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        dests = self._by_key[key]
        dests[dest] -= 1
        if not dests[dest]:
            del dests[dest]
            if not dests:
                del self._by_key[key]

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        dests = self._by_key.get(key)
        if dests:
            out.update(dict.fromkeys(dests))


class FanoutRouter(Router):
    __slots__ = ("_dests",)

    def __init__(self) -> None:
        super().__init__()
        self._dests: dict[Any, int] = {}

    def _index(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        self._dests[dest] = self._dests.get(dest, 0) + 1

    def _unindex(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        self._dests[dest] -= 1
        if not self._dests[dest]:
            del self._dests[dest]

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        out.update(dict.fromkeys(self._dests))


class _Node:
    __slots__ = ("children", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node] | None = None
        self.dests: dict[Any, int] | None = None


class TopicRouter(Router):
    """AMQP topic matching on a trie of dot-separated words (``*`` one word, ``#`` zero or more),
    plus plain string prefixes for bindings carrying :data:`PREFIX_ARG`.

    Light subscriptions (``model.light.LightConsumer``) are indexed without an entry in the binding
    registry: one with a wildcard-free key sits in ``_exact``, a prefix one in ``_light_prefixes``
    (key -> the subscription, or an ordered set of them once a second one shares the key), so an
    idle subscription costs one dict slot and its key string; wildcard ones go into the trie."""

    __slots__ = ("_root", "_prefixes", "_prefix_lengths", "_exact", "_light_prefixes")

    # _prefix_lengths: length -> how many prefix keys (of either table) have it, sorted by length
    # (a new length is rare), so adding or removing a prefix never rescans all of them

    def __init__(self) -> None:
        super().__init__()
        self._root = _Node()
        self._prefixes: dict[str, dict[Any, int]] | None = None
        self._prefix_lengths: dict[int, int] = {}
        self._exact: dict[str, Any] | None = None
        self._light_prefixes: dict[str, Any] | None = None

    def add_light(self, sub: Any, key: str, prefix: bool) -> None:
        if prefix:
            if self._light_prefixes is None:
                self._light_prefixes = {}
            if _table_add(self._light_prefixes, key, sub):
                self._count_length(key, 1)
        elif _has_wildcard(key):
            self._index(sub, key, None)
        else:
            if self._exact is None:
                self._exact = {}
            _table_add(self._exact, key, sub)

    def remove_light(self, sub: Any, key: str, prefix: bool) -> None:
        if prefix:
            if self._light_prefixes is not None and _table_remove(self._light_prefixes, key, sub):
                self._count_length(key, -1)
                if not self._light_prefixes:
                    self._light_prefixes = None
        elif _has_wildcard(key):
            if self._trie_has(sub, key):
                self._unindex(sub, key, None)
        elif self._exact is not None:
            _table_remove(self._exact, key, sub)
            if not self._exact:
                self._exact = None

    def _trie_has(self, sub: Any, key: str) -> bool:
        node: _Node | None = self._root
        for word in key.split("."):
            node = node.children.get(word) if node is not None and node.children else None
        return node is not None and node.dests is not None and sub in node.dests

    def _count_length(self, key: str, delta: int) -> None:
        lengths = self._prefix_lengths
        n = lengths.get(len(key), 0) + delta
        if n:
            new = len(key) not in lengths
            lengths[len(key)] = n
            if new:
                self._prefix_lengths = dict(sorted(lengths.items()))
        else:
            del lengths[len(key)]  # deleting keeps the others in order

    def _index(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        if args and args.get(PREFIX_ARG):
            if self._prefixes is None:
                self._prefixes = {}
            dests = self._prefixes.get(key)
            if dests is None:
                dests = self._prefixes[key] = {}
                self._count_length(key, 1)
            dests[dest] = dests.get(dest, 0) + 1
            return
        node = self._root
        for word in key.split("."):
            if node.children is None:
                node.children = {}
            nxt = node.children.get(word)
            if nxt is None:
                nxt = node.children[word] = _Node()
            node = nxt
        if node.dests is None:
            node.dests = {}
        node.dests[dest] = node.dests.get(dest, 0) + 1

    def _unindex(self, dest: Any, key: str, args: dict[str, Any] | None) -> None:
        if args and args.get(PREFIX_ARG):
            assert self._prefixes is not None
            dests = self._prefixes[key]
            dests[dest] -= 1
            if not dests[dest]:
                del dests[dest]
                if not dests:
                    del self._prefixes[key]
                    self._count_length(key, -1)
            return
        path = [self._root]
        words = key.split(".")
        for word in words:
            path.append(path[-1].children[word])  # type: ignore[index]
        leaf = path[-1]
        assert leaf.dests is not None
        leaf.dests[dest] -= 1
        if not leaf.dests[dest]:
            del leaf.dests[dest]
        # prune empty nodes bottom-up so an unsubscribed topic costs nothing
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.dests:
                break
            node.dests = None
            if node.children:
                break
            parent = path[depth - 1]
            del parent.children[words[depth - 1]]  # type: ignore[union-attr]
            if not parent.children:
                parent.children = None

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        if self._root.children:
            _match(self._root, key.split("."), 0, out)
        if self._exact is not None:
            _table_route(self._exact, key, out)
        if self._prefix_lengths:
            prefixes, light = self._prefixes, self._light_prefixes
            for length in self._prefix_lengths:
                if length > len(key):
                    break
                head = key[:length]
                if prefixes:
                    dests = prefixes.get(head)
                    if dests:
                        out.update(dict.fromkeys(dests))
                if light:
                    _table_route(light, head, out)


def _table_add(table: dict[str, Any], key: str, sub: Any) -> bool:
    """Add ``sub`` under ``key`` (a lone subscription is stored bare, more in an ordered set);
    True when the key is new."""
    current = table.get(key)
    if current is None:
        table[key] = sub
        return True
    if type(current) is dict:
        current[sub] = None
    elif current is not sub:
        table[key] = {current: None, sub: None}
    return False


def _table_remove(table: dict[str, Any], key: str, sub: Any) -> bool:
    """Remove ``sub`` from under ``key``; True when the key is gone."""
    current = table.get(key)
    if current is None:
        return False
    if type(current) is dict:
        current.pop(sub, None)
        if len(current) == 1:
            table[key] = next(iter(current))
        return False
    if current is sub:
        del table[key]
        return True
    return False


def _table_route(table: dict[str, Any], key: str, out: dict[Any, None]) -> None:
    subs = table.get(key)
    if subs is not None:
        if type(subs) is dict:
            out.update(subs)
        else:
            out[subs] = None


def _has_wildcard(key: str) -> bool:
    return ("*" in key or "#" in key) and any(w == "*" or w == "#" for w in key.split("."))


def _match(node: _Node, words: list[str], i: int, out: dict[Any, None]) -> None:
    children = node.children
    if i == len(words):
        if node.dests:
            out.update(dict.fromkeys(node.dests))
        if children:
            nxt = children.get("#")
            if nxt is not None:
                _match(nxt, words, i, out)
        return
    if not children:
        return
    nxt = children.get(words[i])
    if nxt is not None:
        _match(nxt, words, i + 1, out)
    nxt = children.get("*")
    if nxt is not None:
        _match(nxt, words, i + 1, out)
    nxt = children.get("#")
    if nxt is not None:
        for j in range(i, len(words) + 1):
            _match(nxt, words, j, out)


class HeadersRouter(Router):
    """``x-match: all`` (default) or ``any`` over the binding arguments not starting with ``x-``."""

    __slots__ = ()

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        headers = headers or {}
        for (dest, _, _), args in self._bindings.items():
            if dest in out:
                continue
            if _headers_match(args or {}, headers):
                out[dest] = None


def _headers_match(args: dict[str, Any], headers: dict[str, Any]) -> bool:
    mode = str(args.get("x-match", "all"))
    pairs = [(k, v) for k, v in args.items() if not k.startswith("x-")]
    if mode.startswith("any"):
        return any(k in headers and (v is None or headers[k] == v) for k, v in pairs)
    return all(k in headers and (v is None or headers[k] == v) for k, v in pairs)


class PartitionRouter(DirectRouter):
    """A direct exchange that spreads routing keys over partitions (sansmq's partitioned streams,
    RabbitMQ's super streams): partition ``i`` is bound with key ``str(i)`` (RabbitMQ's layout). A
    key bound as it is routes as on any direct exchange (a client that picked the partition itself);
    any other key goes to partition ``crc32(key) % n``, n the number of partitions bound, so one key
    always lands on one partition and AMQP 0-9-1 publishers need not know the partitions."""

    __slots__ = ()

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        by_key = self._by_key
        dests = by_key.get(key)
        if dests is None:
            n = len(by_key)
            dests = by_key.get(str(zlib.crc32(key.encode()) % n)) if n else None
        if dests:
            out.update(dict.fromkeys(dests))


#: the exchange argument that makes a direct exchange a partition router
PARTITION_ARG = "x-partitioned"


ROUTER_TYPES: dict[str, type[Router]] = {
    "direct": DirectRouter,
    "fanout": FanoutRouter,
    "topic": TopicRouter,
    "headers": HeadersRouter,
}

#: the delayed-message exchange type (``delayed``): it routes as its ``x-delayed-type`` argument says
DELAYED_TYPE = "x-delayed-message"


def router_for(type: str, args: dict[str, Any] | None) -> Router:
    """A new router for an exchange of ``type`` (a delayed exchange's is its inner type's)."""
    if type == DELAYED_TYPE:
        type = str((args or {}).get("x-delayed-type"))
    if type == "direct" and args and args.get(PARTITION_ARG) is True:
        return PartitionRouter()
    return ROUTER_TYPES[type]()
