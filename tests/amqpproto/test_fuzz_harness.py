"""The fuzz harness's invariant over the seed corpus and random mutations, without atheris."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus" / "amqpproto"


def _harness():
    spec = importlib.util.spec_from_file_location("amqpproto_fuzz",
                                                  ROOT / "fuzz" / "amqpproto_fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["amqpproto_fuzz"] = mod
    spec.loader.exec_module(mod)
    return mod


harness = _harness()
SEEDS = sorted(CORPUS.iterdir())


def test_corpus_holds_what_the_harness_generates():
    # libFuzzer may add inputs it found to the directory; the seeds must be there unchanged
    for name, data in harness.seeds().items():
        assert (CORPUS / name).read_bytes() == data, name


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.name)
def test_seed(path):
    harness.check(path.read_bytes())


def test_valid_sessions_parse_to_the_end():
    out = harness._run(True, (CORPUS / "client-session").read_bytes()[1:], [1 << 20])
    assert out[-1] == "ConnectionClosed()" and not any(e.startswith("error") for e in out)
    assert any(e.startswith("BasicPublish(") for e in out)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and len(b) > 1:
            del b[i:i + rng.randint(1, 16)]
        else:  # splice a chunk of another seed
            other = SEEDS[rng.randrange(len(SEEDS))].read_bytes()
            j = rng.randrange(len(other))
            b[i:i] = other[j:j + rng.randint(1, 64)]
    return bytes(b)


def test_random_mutations():
    rng = random.Random(20261122)
    seeds = [p.read_bytes() for p in SEEDS]
    for _ in range(300):
        harness.check(_mutate(rng, rng.choice(seeds)))


def test_harness_detects_a_broken_invariant(monkeypatch):
    """The check really compares: a codec whose output depends on chunking is caught."""
    import amqpproto

    real = amqpproto.Connection.receive_data
    calls = {"n": 0}

    def flaky(self, data, now=None):
        calls["n"] += 1
        if calls["n"] == 3:
            data = bytes(data)[:-1] + b"\x00"
        return real(self, data, now)

    monkeypatch.setattr(amqpproto.Connection, "receive_data", flaky)
    with pytest.raises(AssertionError):
        harness.check((CORPUS / "client-session").read_bytes())
