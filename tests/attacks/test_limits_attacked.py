"""The limits' guarantees, attacked at the worst moment across every option of the pool.

The cross product: the executor, by ageing, by ``max_queued`` with each ``when_full``, by the
limit that holds a task back (``key_limit``, ``key_rate_limit``, ``rate_limit``). The held task is
submitted through a view (keys come only through views). The attack lands as the limit lets
the task go: another thread cancels it, released at the same barrier as the gate that frees
its key or the fake clock that opens its slot; or its queue deadline falls on the very clock
reading that opens its slot.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any, NamedTuple, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import RateLimit
from support import (
    AGEING,
    KINDS,
    AnyPool,
    Recorder,
    assert_accounted,
    internals,
    make_pool,
    timer_asleep,
)

LIMITS = [(None, "block"), (4, "block"), (4, "raise"), (4, "evict")]
HOLDERS = ["key_limit", "key_rate_limit", "rate_limit"]


class Config(NamedTuple):
    kind: str
    ageing: Optional[float]
    max_queued: Optional[int]
    when_full: str
    holder: str

    def pool(self, clock: FakeClock) -> AnyPool:
        value: Any = 1 if self.holder == "key_limit" else RateLimit(1, 1.0)
        limit = {self.holder: value}
        pool = make_pool(
            self.kind,
            2,
            clock=clock,
            ageing=self.ageing,
            max_queued=self.max_queued,
            when_full=self.when_full,
            **limit,
        )
        clock.attach(pool)
        return pool

    def hold(self, pool: AnyPool, gate: Gate, clock: FakeClock) -> Future[Any]:
        """Start ``gate`` so that the next task of key "a" is held back; return the gate's."""
        blocker = pool.options(key="a").submit(gate)
        gate.wait_started()
        return blocker

    def release(self, clock: FakeClock, gate: Gate) -> None:
        """What lets the held task go: the gate (a key's running task) or the clock (a slot)."""
        if self.holder == "key_limit":
            gate.open()
        else:
            clock.advance(1.0)


CONFIGS = [
    pytest.param(Config(*values), id="-".join(map(str, values)))
    for values in (
        (kind, ageing, queued, full, holder)
        for kind, ageing, (queued, full), holder in itertools.product(
            KINDS, AGEING, LIMITS, HOLDERS
        )
    )
]


@contextmanager
def attacked(config: Config, clock: FakeClock, gate: Gate) -> Iterator[AnyPool]:
    """The pool of ``config``, key "a" held by ``gate``; on the way out it opens, the pool stops."""
    pool = config.pool(clock)
    try:
        config.hold(pool, gate, clock)
        yield pool
    finally:
        gate.open()
        pool.rate_limit = None  # so that shutdown(wait=True) does not wait out a window
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_cancel_racing_the_limit_that_lets_a_held_task_go_cancels_or_runs_it_never_both(
    config: Config, clock: FakeClock
) -> None:
    gate = Gate()
    ran = Recorder()
    with attacked(config, clock, gate) as pool:
        held = pool.options(key="a").submit(ran, "held")
        later = pool.options(key="b").submit(ran, "later")  # a key of its own
        if config.holder != "rate_limit":
            wait([later], TIMEOUT)
        assert not held.done()
        barrier = threading.Barrier(2, timeout=TIMEOUT)
        outcome: list[bool] = []

        def attack() -> None:
            barrier.wait()
            outcome.append(held.cancel())

        attacker = threading.Thread(target=attack)
        attacker.start()
        barrier.wait()
        config.release(clock, gate)
        attacker.join(TIMEOUT)
        gate.open()
        if config.holder == "rate_limit":
            clock.advance(1.0)  # a slot for "later" too
        assert wait([held, later], TIMEOUT).not_done == set()
        assert outcome == [held.cancelled()]
        assert ran.ran.count("held") == (0 if held.cancelled() else 1)
        assert_accounted(pool)


@pytest.mark.parametrize(
    "config",
    [c for c in CONFIGS if c.values[0].holder != "key_limit"],  # type: ignore[union-attr]
)
def test_a_held_task_whose_deadline_falls_on_its_slot_expires_and_never_runs(
    config: Config, clock: FakeClock
) -> None:
    gate = Gate()
    ran = Recorder()
    with attacked(config, clock, gate) as pool:
        held = pool.options(key="a", timeout=1.0).submit(ran, "held")
        timer_asleep(pool, clock.now + 1.0)
        assert internals(pool).queued() == 1
        clock.advance(1.0)  # one reading: its slot opens and its deadline has come
        assert wait([held], TIMEOUT).not_done == set()
        assert held.cancelled()
        gate.open()
        assert ran.ran == []
        assert pool.statistics().expired == 1
        assert_accounted(pool)
