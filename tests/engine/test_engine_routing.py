"""Exchange routing: topic trie, prefixes, direct/fanout/headers, exchange-to-exchange bindings."""

import pytest

from engine import MemoryStore
from engine._timers import TimerQueue
from engine.model import Model, Queue
from engine.model.routers import PREFIX_ARG, DirectRouter, FanoutRouter, HeadersRouter, TopicRouter


def route(router, key, headers=None):
    out = {}
    router.route(key, headers, out)
    return list(out)


@pytest.mark.parametrize(
    "pattern,key,match",
    [
        ("a.b.c", "a.b.c", True),
        ("a.b.c", "a.b", False),
        ("a.*.c", "a.x.c", True),
        ("a.*.c", "a.x.y.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c.d", True),
        ("#", "anything.at.all", True),
        ("#.c", "a.b.c", True),
        ("#.c", "c", True),
        ("#.c", "a.b.d", False),
        ("a.#.z", "a.z", True),
        ("a.#.z", "a.b.c.z", True),
        ("a.#.z", "a.b.c.y", False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("*.*", "a.b", True),
        ("a.#.#", "a", True),
    ],
)
def test_topic_patterns(pattern, key, match):
    r = TopicRouter()
    r.add("Q", pattern)
    assert (route(r, key) == ["Q"]) is match


def test_topic_dedups_and_keeps_binding_order():
    r = TopicRouter()
    r.add("q1", "a.#")
    r.add("q2", "a.b")
    r.add("q1", "*.b")
    assert route(r, "a.b") == ["q2", "q1"]  # trie order, each destination once


def test_topic_unbind_prunes_trie():
    r = TopicRouter()
    r.add("q", "a.b.c")
    r.add("q", "a.*")
    assert r.remove("q", "a.b.c")
    assert route(r, "a.b.c") == []
    assert route(r, "a.x") == ["q"]
    assert r.remove("q", "a.*")
    assert r._root.children is None
    assert not r.remove("q", "a.*")


def test_prefix_bindings():
    r = TopicRouter()
    r.add("p", "foo", {PREFIX_ARG: True})
    r.add("t", "foo.bar")
    assert route(r, "foobar") == ["p"]
    assert sorted(route(r, "foo.bar")) == ["p", "t"]
    assert route(r, "fo") == []
    r.remove("p", "foo", {PREFIX_ARG: True})
    assert route(r, "foobar") == []


def test_direct_and_fanout():
    d = DirectRouter()
    d.add("q1", "k")
    d.add("q2", "k")
    d.add("q1", "k", {"x": 1})
    assert route(d, "k") == ["q1", "q2"]
    d.remove("q1", "k")
    assert route(d, "k") == ["q1", "q2"]  # still bound through the binding with arguments
    f = FanoutRouter()
    f.add("a", "x")
    f.add("b", "y")
    assert route(f, "zzz") == ["a", "b"]


def test_headers_any_all():
    h = HeadersRouter()
    h.add("all", "", {"x-match": "all", "a": "1", "b": "2"})
    h.add("any", "", {"x-match": "any", "a": "1", "b": "2"})
    assert route(h, "", {"a": "1", "b": "2"}) == ["all", "any"]
    assert route(h, "", {"a": "1"}) == ["any"]
    assert route(h, "", {"a": "2"}) == []


def make_model():
    m = Model(MemoryStore(), TimerQueue())
    return m, m.add_vhost("/")


def test_exchange_to_exchange_with_cycle():
    m, vh = make_model()
    x1 = m.declare_exchange(vh, "x1", "fanout")
    x2 = m.declare_exchange(vh, "x2", "fanout")
    q = m.declare_queue(vh, "q")
    m.bind(vh, x2, x1, "")
    m.bind(vh, x1, x2, "")  # cycle
    m.bind(vh, q, x2, "")
    assert m.route(vh, x1, "k", None) == [q]
    assert m.route(vh, x2, "k", None) == [q]


def test_default_exchange_and_unknown_exchange():
    m, vh = make_model()
    q = m.declare_queue(vh, "q")
    assert m.route(vh, vh.exchanges[""], "q", None) == [q]
    assert m.route(vh, vh.exchanges[""], "nope", None) == []
    assert set(vh.exchanges) == {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match",
                                 "amq.rabbitmq.trace"}


def test_delete_queue_removes_bindings():
    m, vh = make_model()
    q = m.declare_queue(vh, "q")
    topic = vh.exchanges["amq.topic"]
    m.bind(vh, q, topic, "a.*")
    assert m.route(vh, topic, "a.b", None) == [q]
    m.delete_queue(q)
    assert m.route(vh, topic, "a.b", None) == []
    assert isinstance(q, Queue) and q.bindings is None
