"""The guarantees both executors make, attacked at the worst moment across their options.

Every test runs over the cross product of the executor (``PriorityThreadPoolExecutor``, or
``PriorityExecutor`` in front of a ``ThreadPoolExecutor``), ageing, ``max_queued`` with each
``when_full`` policy, and submitting directly or through a view. The attacker is another
thread released at the same barrier as the pool's next start, a done-callback (which runs on
a worker, or on the wrapped executor's thread), or the fake clock. Nothing sleeps to
synchronise; every wait has a timeout.
"""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import QueueFullError
from support import (
    CONFIGS,
    SHUTDOWN_MESSAGE,
    AnyPool,
    Config,
    Recorder,
    assert_accounted,
    assert_done_promptly,
    in_thread,
    internals,
    wait_blocked,
    wait_until,
)


def held(config: Config, gate: Gate, clock: Optional[FakeClock] = None) -> AnyPool:
    """A one-worker (one-slot) pool whose worker runs ``gate`` until the test opens it."""
    pool = config.pool(clock)
    config.submit(pool, gate)
    gate.wait_started()
    return pool


@pytest.mark.parametrize("config", CONFIGS)
def test_priority_then_submission_order(config: Config, gate: Gate) -> None:
    order = Recorder()
    pool = held(config, gate)
    try:
        futures = [
            config.submit(pool, order, tag, priority=p)
            for tag, p in [("a", 1), ("b", 3), ("c", 3), ("d", 2)]
        ]
        gate.open()
        assert wait(futures, TIMEOUT).not_done == set()
        assert order.ran == ["b", "c", "d", "a"]
        assert_accounted(pool)
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_cancel_racing_the_start_either_cancels_or_runs_never_both(
    config: Config,
) -> None:
    pool = config.pool()
    runs = Recorder()
    try:
        for round_ in range(20):
            gate = Gate()
            config.submit(pool, gate)
            gate.wait_started()
            victim = config.submit(pool, runs, round_)
            race = threading.Barrier(2, timeout=TIMEOUT)

            def cancel(victim: Future[Any] = victim, race: threading.Barrier = race) -> bool:
                race.wait()
                return victim.cancel()

            canceller = in_thread(cancel)
            race.wait()
            gate.open()
            won = canceller.result()
            assert wait([victim], TIMEOUT).not_done == set()
            assert victim.cancelled() is won
            assert (round_ in runs.ran) is not won, f"round {round_}: cancelled and run"
        assert len(runs.ran) == len(set(runs.ran)), "a task ran twice"
        assert_accounted(pool)
    finally:
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_queue_jump_racing_the_start_goes_next_and_its_window_closes(config: Config) -> None:
    """Another thread submits an urgent task as the worker (or slot) frees up: it starts
    before every task still queued when its submit returned (one may have been taken and not
    yet recorded), and the take that starts it closes the jump window, so no later submit
    yields (see tests/pools/test_jumps.py for the window itself)."""
    pool = config.pool()
    runs = Recorder()
    state = internals(pool)
    try:
        for round_ in range(10):
            gate = Gate()
            config.submit(pool, gate)
            gate.wait_started()
            lows = [config.submit(pool, runs, (round_, i), priority=-1) for i in range(3)]
            race = threading.Barrier(2, timeout=TIMEOUT)

            def jump(
                round_: int = round_, race: threading.Barrier = race
            ) -> tuple[Future[Any], int]:
                race.wait()
                urgent = config.submit(pool, runs, (round_, "urgent"), priority=5)
                return urgent, sum(tag[0] == round_ for tag in runs.ran)

            jumper = in_thread(jump)
            race.wait()
            gate.open()
            urgent, ran_before = jumper.result()
            assert wait([urgent, *lows], TIMEOUT).not_done == set()
            ran = [tag for tag in runs.ran if tag[0] == round_]
            assert ran.index((round_, "urgent")) <= ran_before + 1, f"round {round_}: {ran}"
            assert not state.jump_window_open(), "a window left open after the urgent task started"
        assert_accounted(pool)
    finally:
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_expiry_racing_a_cancel_and_the_start_settles_the_task_once(
    config: Config, clock: FakeClock
) -> None:
    pool = config.pool(clock)
    runs = Recorder()
    outcomes: list[str] = []
    try:
        for round_ in range(10):
            gate = Gate()
            config.submit(pool, gate)
            gate.wait_started()
            victim = config.submit(pool, runs, round_, timeout=1.0)
            race = threading.Barrier(3, timeout=TIMEOUT)

            def expire(race: threading.Barrier = race) -> None:
                race.wait()
                clock.advance(1.0)

            def cancel(victim: Future[Any] = victim, race: threading.Barrier = race) -> bool:
                race.wait()
                return victim.cancel()

            attackers = in_thread(expire), in_thread(cancel)
            race.wait()
            gate.open()
            attackers[0].result()
            attackers[1].result()
            assert wait([victim], TIMEOUT).not_done == set()
            ran = round_ in runs.ran
            assert victim.cancelled() is not ran, f"round {round_}: cancelled and run"
            outcomes.append("ran" if ran else "cancelled")
        assert_accounted(pool)
        stats = pool.statistics()
        assert stats.cancelled + stats.expired == outcomes.count("cancelled")
    finally:
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_deadline_expires_while_every_worker_is_busy(
    config: Config, clock: FakeClock, gate: Gate
) -> None:
    pool = held(config, gate, clock)
    runs = Recorder()
    try:
        doomed = config.submit(pool, runs, "doomed", timeout=5.0)
        kept = config.submit(pool, runs, "kept")
        waiter = in_thread(lambda: wait([doomed], TIMEOUT))
        clock.advance(5.0)
        assert waiter.result().done == {doomed}
        assert_done_promptly(doomed)
        assert doomed.cancelled()
        gate.open()
        assert kept.result(TIMEOUT) == "kept"
        assert runs.ran == ["kept"]
        assert pool.statistics().expired == 1
        assert_accounted(pool)
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_the_running_task_cancels_reprioritises_and_pauses_as_it_ends(
    config: Config, gate: Gate
) -> None:
    # The last thing the running task does, just before the pool would start the next one:
    # cancel one queued task, move another to the front, and pause.
    order = Recorder()
    pool = config.pool()
    seen: list[object] = []
    queued: list[Future[Any]] = []

    def attack() -> None:
        gate()
        victim, _first, moved = queued
        seen.extend([victim.cancel(), pool.set_priority(moved, 9)])
        pool.pause()

    try:
        blocker = config.submit(pool, attack)
        gate.wait_started()
        for tag, priority in [("victim", 5), ("first", 4), ("moved", 1)]:
            queued.append(config.submit(pool, order, tag, priority=priority))
        gate.open()
        blocker.result(TIMEOUT)
        assert wait(queued[:1], TIMEOUT).not_done == set()
        assert seen == [True, True]
        assert pool.statistics().queued == 2
        assert not queued[1].done()
        assert not queued[2].done()
        pool.resume()
        assert wait(queued, TIMEOUT).not_done == set()
        assert order.ran == ["moved", "first"]
        assert_accounted(pool)
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_done_callback_cancelling_the_next_task_either_cancels_or_runs_it(
    config: Config, gate: Gate
) -> None:
    # The callback runs on the pool's thread (a worker, or the wrapped executor's) as the
    # next start begins: a worker runs callbacks before it looks again, a front frees the
    # slot first. Either way the task is cancelled or runs, exactly once.
    runs = Recorder()
    pool = config.pool()
    try:
        blocker = config.submit(pool, gate)
        gate.wait_started()
        victim = config.submit(pool, runs, "victim")
        won: list[bool] = []
        blocker.add_done_callback(lambda _: won.append(victim.cancel()))
        gate.open()
        assert wait([victim], TIMEOUT).not_done == set()
        wait_until(lambda: won != [], "the callback runs")
        assert victim.cancelled() is won[0]
        assert (runs.ran == ["victim"]) is not won[0]
        assert_accounted(pool)
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_join_waits_for_work_that_done_callbacks_submit(config: Config) -> None:
    pool = config.pool(workers=2)
    chain: list[Future[Any]] = []

    def more(_: Future[Any]) -> None:
        if len(chain) < 30:
            chain.append(config.submit(pool, len, chain))
            chain[-1].add_done_callback(more)

    try:
        chain.append(config.submit(pool, len, chain))
        chain[-1].add_done_callback(more)
        assert pool.join(TIMEOUT)
        assert len(chain) == 30
        assert all(f.done() for f in chain)
        assert_accounted(pool)
    finally:
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_shutdown_cancelling_futures_while_another_thread_submits(config: Config) -> None:
    pool = config.pool(workers=2)
    runs = Recorder()
    accepted: list[tuple[int, Future[Any]]] = []
    refused: list[str] = []
    halfway = threading.Event()

    def submit_many() -> None:
        for i in range(300):
            if i == 100:
                halfway.set()
            elif i == 200:  # the rest lands after shutdown has begun
                wait_until(lambda: pool._shutdown, "shutdown begins")
            try:
                accepted.append((i, config.submit(pool, runs, i)))
            except QueueFullError:
                refused.append("full")
            except RuntimeError as exc:
                refused.append("shutdown" if str(exc) == SHUTDOWN_MESSAGE else repr(exc))

    submitter = in_thread(submit_many)
    try:
        assert halfway.wait(TIMEOUT)
        pool.shutdown(wait=True, cancel_futures=True)
        submitter.result()
        assert wait([f for _, f in accepted], TIMEOUT).not_done == set()
        ran = set(runs.ran)
        assert len(ran) == len(runs.ran), "a task ran twice"
        for i, future in accepted:
            assert future.cancelled() is (i not in ran), f"task {i}: cancelled and run"
            if not future.cancelled():
                assert future.result(0) == i
        assert "shutdown" in refused, "the shutdown never refused a submit"
        assert set(refused) <= {"shutdown", "full"}, refused
        pool._check_invariants()
        stats = pool.statistics()
        assert stats.submitted == len(accepted)
        assert stats.completed + stats.cancelled == len(accepted)
    finally:
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_full_queue_applies_its_policy(config: Config, gate: Gate) -> None:
    if config.max_queued is None:
        pytest.skip("an unbounded queue is never full")
    pool = held(config, gate)
    try:
        queued = [config.submit(pool, str, i, priority=i) for i in range(4)]
        if config.when_full == "raise":
            with pytest.raises(QueueFullError):
                config.submit(pool, str, "extra", priority=9)
        elif config.when_full == "evict":
            extra = config.submit(pool, str, "extra", priority=9)
            assert_done_promptly(queued[0])
            assert queued[0].cancelled(), "the lowest-ranked task was not evicted"
            with pytest.raises(CancelledError):
                queued[0].result(0)
            queued[0] = extra
        else:
            blocked = in_thread(lambda: config.submit(pool, str, "extra", priority=9))
            wait_blocked(pool)
            gate.open()
            queued.append(blocked.result())
        gate.open()
        assert wait(queued, TIMEOUT).not_done == set()
        assert_accounted(pool)
    finally:
        gate.open()
        pool.shutdown()
