"""The fuzz harness's invariants over the seed corpus plus random mutations, without atheris."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import stompproto_fuzz

import stompproto

CORPUS = sorted((Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "stompproto").iterdir())


def _mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[i:i] = bytes([rng.choice(b"\x00\n\r:\\cA")])
        elif op == 2 and b:
            del b[i : i + rng.randint(1, 8)]
        elif op == 3:
            other = rng.choice(seeds)
            j = rng.randrange(len(other))
            b[i:i] = other[j : j + rng.randint(1, 40)]
        else:
            b[i:i] = bytes(b[i : i + rng.randint(1, 16)])  # duplicate a run
    return bytes(b)


def test_corpus_exists_and_is_varied():
    assert len(CORPUS) >= 5
    outcomes = {stompproto_fuzz.run(p.read_bytes(), None)[1] for p in CORPUS}
    assert outcomes == {False}  # the seeds themselves are valid sessions


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_seed(path):
    stompproto_fuzz.check(path.read_bytes())


def test_random_mutations():
    rng = random.Random(1234)
    seeds = [p.read_bytes() for p in CORPUS]
    errored = 0
    for _ in range(400):
        data = _mutate(rng, rng.choice(seeds), seeds)
        stompproto_fuzz.check(data)
        errored += stompproto_fuzz.run(data, None)[1]
    assert 0 < errored < 400  # mutations exercise both the error and the happy paths


@pytest.mark.skipif(stompproto.COMPILED, reason="patches a method, which a mypyc-compiled caller does not "
                    "call through; the pure-Python run covers this")
def test_the_harness_fails_on_a_bug_the_codec_retypes(monkeypatch):
    """A bug of ours surfaces as a RemoteProtocolError (the codec convention); the harness must
    still count it as a failure."""
    from stompproto._readers import FrameReader

    def broken(*args):
        raise KeyError("planted")

    monkeypatch.setattr(FrameReader, "next", broken)
    with pytest.raises(AssertionError, match="internal error"):
        stompproto_fuzz.check(CORPUS[0].read_bytes())
