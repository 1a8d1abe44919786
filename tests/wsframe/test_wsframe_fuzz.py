"""Runs the atheris harness's check over the seed corpus and a few hundred mutations,
without atheris (the harness itself is smoke-run separately)."""
import importlib.util
import random
from pathlib import Path

import pytest

import wsframe

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus" / "wsframe"


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("wsframe_fuzz", ROOT / "fuzz" / "wsframe_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seeds() -> list[bytes]:
    return [p.read_bytes() for p in sorted(CORPUS.iterdir()) if p.is_file()]


def test_corpus_is_present_and_matches_the_generator(harness):
    generated = harness.seeds()
    for name, data in generated.items():
        assert (CORPUS / name).read_bytes() == data, f"regenerate {name} with --write-seeds"
    # every mode is seeded
    assert {data[0] % len(harness.MODES) for data in generated.values()} == set(range(len(harness.MODES)))


def test_seed_corpus_passes_and_reaches_messages(harness):
    from wsframe import BytesMessage, TextMessage

    messages = 0
    for data in seeds():
        harness.check(data)
        events = harness.run(harness.MODES[data[0] % len(harness.MODES)](), [data[2:]])
        messages += sum(isinstance(e, (TextMessage, BytesMessage)) for e in events)
    assert messages >= 10  # the seeds get past the handshake into framing


def mutate(rnd: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(5)
        pos = rnd.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rnd.randrange(8)
        elif op == 1:
            buf[pos:pos] = rnd.randbytes(rnd.randint(1, 8))
        elif op == 2:
            del buf[pos : pos + rnd.randint(1, 16)]
        elif op == 3 and buf:
            buf[min(pos, len(buf) - 1)] = rnd.choice([0x00, 0x7E, 0x7F, 0x80, 0xFF, 0x88, 0x0D, 0x0A])
        else:
            other = rnd.choice(pool)
            start = rnd.randrange(len(other) + 1)
            buf[pos:pos] = other[start : start + rnd.randint(1, 40)]
    return bytes(buf)


def test_mutations_keep_the_invariants(harness):
    pool = seeds()
    rnd = random.Random(6455)
    for _ in range(400):
        harness.check(mutate(rnd, rnd.choice(pool), pool))


@pytest.mark.skipif(wsframe.COMPILED, reason="patches a method, which a mypyc-compiled caller does not "
                    "call through; the pure-Python run covers this")
def test_the_harness_fails_on_a_bug_the_codec_retypes(harness, monkeypatch):
    """A bug of ours surfaces as a RemoteProtocolError (the codec convention); the harness must
    still count it as a failure."""
    from wsframe._readers import FrameReader

    def broken(*args):
        raise IndexError("planted")

    monkeypatch.setattr(FrameReader, "next_frame", broken)
    with pytest.raises(AssertionError, match="internal error"):
        for data in seeds():
            harness.check(data)
