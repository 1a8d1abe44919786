"""SyncWorker: one dedicated sync thread, tokens requested during a sync coalesced into the next."""

import threading

from servers._syncer import SyncWorker


def test_tokens_requested_during_a_sync_are_coalesced_into_the_next() -> None:
    started, release = threading.Event(), threading.Event()
    runs: list[tuple[int, str]] = []
    done: list[tuple[int, object]] = []
    finished = threading.Event()

    def run_sync(token: int) -> None:
        runs.append((token, threading.current_thread().name))
        started.set()
        release.wait(10)

    def on_done(token: int, exc: BaseException | None) -> None:
        done.append((token, exc))
        if token == 5:
            finished.set()

    worker = SyncWorker(run_sync, on_done)
    worker.request(1)
    assert started.wait(10)
    for token in (2, 3, 5, 4):  # arrive while sync 1 runs; 4 after 5 is already covered
        worker.request(token)
    release.set()
    assert finished.wait(10)
    worker.close()
    assert [t for t, _ in runs] == [1, 5]
    assert done == [(1, None), (5, None)]
    assert {name for _, name in runs} == {"sansmq-sync"}


def test_a_failed_sync_is_reported_and_the_worker_goes_on() -> None:
    done: list[tuple[int, str | None]] = []
    first, second = threading.Event(), threading.Event()

    def run_sync(token: int) -> None:
        if token == 1:
            raise OSError("disk on fire")

    def on_done(token: int, exc: BaseException | None) -> None:
        done.append((token, None if exc is None else str(exc)))
        (second if token == 2 else first).set()

    worker = SyncWorker(run_sync, on_done)
    worker.request(1)
    assert first.wait(10)
    worker.request(2)
    assert second.wait(10)
    worker.close()
    assert done == [(1, "disk on fire"), (2, None)]


def test_close_finishes_what_was_requested() -> None:
    done: list[int] = []
    worker = SyncWorker(lambda token: None, lambda token, exc: done.append(token))
    worker.request(3)
    worker.close()
    assert done == [3]
    SyncWorker(lambda token: None, lambda token, exc: None).close()  # never started: nothing to join
