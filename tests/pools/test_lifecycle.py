"""The pool's threads over its life and the process's: starting worker threads (a ``Thread.start``
interrupted, a slow initializer), the interpreter's exit (queued work drains, a paused pool and
busy pools included) and ``fork`` (a child refuses the inherited pool and can use a new one).

Tests whose failure mode is a broken interpreter exit or a fork run a script in a fresh
interpreter with ``support.run_script``, so a hang fails that test instead of freezing the run.
The others force their interleaving with a wrapped ``Thread.start`` or a blocking initializer
and events. Nothing sleeps to synchronise and every wait has a timeout. (A ``Thread.start`` that
raises ``RuntimeError``: test_faults.py; a failing initializer: test_integration.py.)
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import wait

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import PriorityThreadPoolExecutor
from support import (
    EXIT_MESSAGE,
    EXITING,
    FORKED_MESSAGE,
    assert_clean_exit,
    in_thread,
    internals,
    run_script,
    wait_until,
)

# -- starting worker threads ----------------------------------------------------------------


# Thread.start interrupted. A start() that raises after the thread began (a signal handler
# raising KeyboardInterrupt, say) takes back no wake-up the new thread also consumed: were
# ``wakes`` to go to -1, no later submit would wake an idle worker. A thread written off before
# it reached its loop exits instead of parking for ever outside ``threads``. An interrupt raised
# before the thread began, with another worker present, reaches the caller of submit, and the
# task stays queued.
# A start() raising RuntimeError before the thread began, with and without another worker,
# is covered by test_faults.py (test_a_worker_that_cannot_start_*).


def shut_down_in_time(pool: PriorityThreadPoolExecutor) -> None:
    """``pool.shutdown(wait=True)`` from a helper thread, which must return within TIMEOUT."""
    in_thread(pool.shutdown, "shutdown").result()


def test_an_interrupt_in_thread_start_after_the_worker_arrived_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = threading.Event()
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        real_start(self)
        if self.name == "interrupted_0":
            # The thread has begun: let it arrive and run the task, then interrupt start().
            assert ran.wait(TIMEOUT), "the new worker never ran the task"
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    pool = PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="interrupted")
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.submit(ran.set)
        assert pool.join(TIMEOUT), "the task never finished"  # not lost: its future is done
        wakes, arriving, starting = internals(pool).worker_counts()
        # wakes is 1 while the worker yields before it parks, never below 0.
        assert (wakes >= 0, arriving, starting) == (True, 0, 0), f"{wakes=}"
        assert [t.name for t in pool._threads] == ["interrupted_0"]
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.submitted, stats.completed) == (1, 1)
        wait_until(lambda: pool.statistics().idle_workers == 1, "the worker parks")
        assert internals(pool).worker_counts() == (0, 0, 0)
        assert pool.submit(str, "later").result(TIMEOUT) == "later"
        assert [t.name for t in pool._threads] == ["interrupted_0"], "the idle worker slept on"
        pool._check_invariants()
        shut_down_in_time(pool)
    finally:
        pool.shutdown()


def test_an_interrupt_in_thread_start_before_the_worker_arrived_writes_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    interrupted: list[threading.Thread] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        real_start(self)
        if not interrupted:
            interrupted.append(self)  # still in its initializer: it has not arrived
            raise KeyboardInterrupt

    def initializer() -> None:
        assert release.wait(TIMEOUT)

    monkeypatch.setattr(threading.Thread, "start", start)
    pool = PriorityThreadPoolExecutor(
        max_workers=2, thread_name_prefix="interrupted", initializer=initializer
    )
    try:
        ran = threading.Event()
        with pytest.raises(KeyboardInterrupt):
            pool.submit(ran.set)
        # No other worker: the submit is undone, as when start() fails outright.
        assert internals(pool).queued() == 0
        assert pool.statistics().submitted == 0
        assert not pool._threads
        assert internals(pool).worker_counts() == (0, 0, 0)
        pool._check_invariants()
        release.set()  # the written-off thread arrives, finds out, and exits at once
        interrupted[0].join(TIMEOUT)
        assert not interrupted[0].is_alive(), "the written-off thread stayed"
        assert internals(pool).worker_counts() == (0, 0, 0)
        assert not ran.is_set()
        assert pool.submit(str, "later").result(TIMEOUT) == "later"
        pool._check_invariants()
        shut_down_in_time(pool)
    finally:
        release.set()
        pool.shutdown()


def test_an_interrupt_before_a_second_worker_starts_is_raised_and_the_task_stays_queued(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="interrupted")
    try:
        pool.submit(gate)
        gate.wait_started()
        real_start = threading.Thread.start

        def start(self: threading.Thread) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(threading.Thread, "start", start)
        ran = threading.Event()
        with pytest.raises(KeyboardInterrupt):
            pool.submit(ran.set)
        monkeypatch.setattr(threading.Thread, "start", real_start)
        # Another worker can run it, so the task stays queued; the interrupt is not swallowed.
        assert internals(pool).queued() == 1
        assert [t.name for t in pool._threads] == ["interrupted_0"]
        assert internals(pool).worker_counts() == (0, 0, 0)
        pool._check_invariants()
        gate.open()
        assert ran.wait(TIMEOUT), "the queued task never ran"
        assert pool.join(TIMEOUT)
        pool._check_invariants()
        shut_down_in_time(pool)
    finally:
        gate.open()
        pool.shutdown()


# A slow initializer does not keep an idle worker from a new task: a thread still in its
# initializer does not count as a worker on its way (``wakes``), so a submit wakes an idle worker
# instead of leaving the task to wait for the initializer to finish.


def test_an_idle_worker_takes_a_new_task_while_another_thread_is_in_its_initializer(
    gate: Gate,
) -> None:
    release = threading.Event()

    def initializer() -> None:
        if threading.current_thread().name == "slowinit_1":
            assert release.wait(TIMEOUT)  # opening a connection, say

    pool = PriorityThreadPoolExecutor(
        max_workers=2, thread_name_prefix="slowinit", initializer=initializer
    )
    try:
        pool.submit(gate)
        gate.wait_started()
        first = pool.submit(str, "first")  # starts slowinit_1, which stays in its initializer
        gate.open()
        assert first.result(TIMEOUT) == "first"  # run by slowinit_0
        wait_until(lambda: pool.statistics().idle_workers == 1, "slowinit_0 parks")
        later = pool.submit(threading.current_thread)
        # Not a full TIMEOUT: the initializer gives up then, and would fail ``later`` instead.
        assert wait([later], TIMEOUT / 2).done == {later}, "the task waited for the initializer"
        assert later.result(0).name == "slowinit_0"
        assert not release.is_set()
        pool._check_invariants()
    finally:
        release.set()
        gate.open()
        pool.shutdown()


# -- interpreter exit -----------------------------------------------------------------------


def test_interpreter_exit_drains_queued_work_behind_a_running_task() -> None:
    result = run_script(
        """
        import atexit, threading
        from priority_executor import Priority, PriorityThreadPoolExecutor
        """,
        EXITING,
        """
        pool = PriorityThreadPoolExecutor(max_workers=1)
        started = threading.Event()

        def blocker():
            started.set()
            assert exiting.wait(TIMEOUT), "the interpreter never started to exit"
            print("blocker done", flush=True)

        def at_exit():
            # atexit handlers run after the pool's workers were joined.
            print("atexit, workers alive:", [t.is_alive() for t in workers], flush=True)
            try:
                pool.submit(print, "too late")
            except RuntimeError as exc:
                print("submit at exit:", exc, flush=True)

        pool.submit(blocker)
        assert started.wait(TIMEOUT)
        workers = list(pool._threads)
        pool.submit(print, "low", flush=True, priority=Priority.LOW)
        pool.submit(print, "high", flush=True, priority=Priority.HIGH)
        pool.submit(print, "normal", flush=True)
        atexit.register(at_exit)
        print("main done", flush=True)
        """,
    )
    assert_clean_exit(
        result,
        [
            "main done",
            "blocker done",
            "high",
            "normal",
            "low",
            "atexit, workers alive: [False]",
            f"submit at exit: {EXIT_MESSAGE}",
        ],
    )


def test_interpreter_exit_with_a_pool_dropped_without_shutdown() -> None:
    result = run_script(
        """
        import gc, threading, weakref
        from priority_executor import PriorityThreadPoolExecutor
        """,
        EXITING,
        """
        started = threading.Event()

        def blocker():
            started.set()
            assert exiting.wait(TIMEOUT), "the interpreter never started to exit"
            print("blocker done", flush=True)

        def start_work():
            pool = PriorityThreadPoolExecutor(max_workers=1)
            pool.submit(blocker)
            assert started.wait(TIMEOUT)
            for i in range(3):
                pool.submit(print, "task", i, flush=True, timeout=10 * TIMEOUT)
            return weakref.ref(pool)

        pool_ref = start_work()
        gc.collect()
        print("pool collected:", pool_ref() is None, flush=True)
        """,
    )
    assert_clean_exit(
        result, ["pool collected: True", "blocker done", "task 0", "task 1", "task 2"]
    )


# Interpreter exit with a paused pool and busy pools drains them all, even where the interpreter
# refuses new threads at exit (early 3.12 releases, such as 3.12.1): there, a RuntimeError from
# stop() of a paused pool with no worker would escape the exit hook, so the pools after it would
# never be stopped, their queued work could be cut off, and a traceback would be printed. Where a
# thread may still start at exit (3.9 to 3.11, 3.13) the paused pool's tasks run;
# ``threads-refused`` simulates the refusal so that every version tests that path.

EXIT_SCRIPT = """
import threading
from priority_executor import Priority, PriorityThreadPoolExecutor
"""


EXIT_WORK = """
if REFUSE:
    real_start = threading.Thread.start

    def start(self):
        if exiting.is_set():
            raise RuntimeError("can't create new thread at interpreter shutdown")
        real_start(self)

    threading.Thread.start = start

output = threading.Lock()

def say(line):
    with output:  # one whole line at a time, whichever thread prints
        print(line, flush=True)

def outcome(name):
    def report(future):
        if future.cancelled():
            say(f"{name} cancelled")
    return report

paused = PriorityThreadPoolExecutor(max_workers=1)
paused.pause()
for i, priority in enumerate([Priority.LOW, Priority.HIGH]):
    paused.submit(say, f"paused {i} ran", priority=priority).add_done_callback(
        outcome(f"paused {i}")
    )

def blocker(started):
    started.set()
    assert exiting.wait(TIMEOUT), "the interpreter never started to exit"

busy = []
for i in range(3):
    pool = PriorityThreadPoolExecutor(max_workers=1)
    started = threading.Event()
    pool.submit(blocker, started)
    assert started.wait(TIMEOUT)
    pool.submit(say, f"busy {i} drained").add_done_callback(outcome(f"busy {i}"))
    busy.append(pool)
say("main done")
"""


#: What the pool logs (through logging's last resort, to stderr) when no worker can start.
NO_WORKER_LINE = "no worker thread could start: 2 queued tasks cancelled\n"


@pytest.mark.parametrize("refuse", [False, True], ids=["interpreter", "threads-refused"])
def test_interpreter_exit_with_a_paused_pool_and_busy_pools_drains_them_all(
    refuse: bool,
) -> None:
    result = run_script(EXIT_SCRIPT, EXITING, f"REFUSE = {refuse!r}\n", EXIT_WORK)
    lines = result.stdout.splitlines()
    common = ["main done", "busy 0 drained", "busy 1 drained", "busy 2 drained"]
    ran = ["paused 0 ran", "paused 1 ran"]
    cancelled = ["paused 0 cancelled", "paused 1 cancelled"]
    if refuse or "paused 0 cancelled" in lines:  # as Python 3.12.1 does by itself
        expected, stderr = cancelled, NO_WORKER_LINE
    else:
        expected, stderr = ran, ""
    assert (result.returncode, sorted(lines), result.stderr) == (
        0,
        sorted(common + expected),
        stderr,
    )
    assert lines[0] == "main done"
    if expected is ran:
        assert lines.index("paused 1 ran") < lines.index("paused 0 ran"), "priority order"


# -- fork -----------------------------------------------------------------------------------


FORK_WHILE_SUBMITTING_SCRIPT = """
import os, signal, sys, threading, warnings
from concurrent.futures.thread import BrokenThreadPool
from priority_executor import Priority, PriorityThreadPoolExecutor

FORKS = 20
FORKED_MESSAGE = {forked_message!r}
pool = PriorityThreadPoolExecutor(max_workers=4)
stop = threading.Event()
submitted = threading.Semaphore(0)

def submitter():
    # Submit to the shared pool and start and stop pools of our own, so that forks land
    # in the middle of submits, of thread starts and of shutdowns.
    while not stop.is_set():
        pool.submit(abs, -1, priority=Priority.HIGH)
        with PriorityThreadPoolExecutor(max_workers=2) as own:
            own.submit(abs, -2, timeout=TIMEOUT)
        submitted.release()

def child():
    signal.alarm(int(TIMEOUT))  # a hung child dies instead of hanging its parent
    try:
        pool.submit(abs, -3)
    except BrokenThreadPool as exc:
        assert str(exc) == FORKED_MESSAGE, exc
    else:
        raise AssertionError("the inherited pool accepted work")
    pool.shutdown()
    with PriorityThreadPoolExecutor(max_workers=2) as fresh:
        assert fresh.submit(abs, -4, priority=Priority.HIGH).result(TIMEOUT) == 4
        assert fresh.submit(abs, -5, timeout=TIMEOUT).result(TIMEOUT) == 5
        assert list(fresh.map(abs, [-6, -7], timeout=TIMEOUT)) == [6, 7]
    print("child ok", flush=True)

def fork_children():
    statuses = []
    for _ in range(FORKS):
        assert submitted.acquire(timeout=TIMEOUT)
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a multi-threaded process: that is the point.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            child()
            sys.exit(0)  # a normal interpreter exit, with its exit hooks
        _, status = os.waitpid(pid, 0)  # bounded by the child's alarm
        statuses.append(os.waitstatus_to_exitcode(status))
    return statuses

submitters = [threading.Thread(target=submitter) for _ in range(3)]
for thread in submitters:
    thread.start()
statuses = fork_children()
stop.set()
for thread in submitters:
    thread.join(TIMEOUT)
assert pool.submit(abs, -8).result(TIMEOUT) == 8  # the parent's pool is unaffected
pool.shutdown()
print("exit statuses:", sorted(set(statuses)), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_other_threads_submit_gives_a_usable_child() -> None:
    # No faulthandler watchdog: its helper thread does not survive fork, and a child would
    # wait for it at exit. Each child has an alarm instead; the parent, run()'s timeout.
    script = FORK_WHILE_SUBMITTING_SCRIPT.format(forked_message=FORKED_MESSAGE)
    result = run_script(script, watchdog=False)
    assert_clean_exit(result, ["child ok"] * 20 + ["exit statuses: [0]"])


# A pool inherited across fork: the child keeps neither the inherited pool's queue nor its
# ``running`` count, so join() in the child never waits for tasks whose threads do not exist
# there.

INHERITED_POOL_SCRIPT = """
import os, signal, sys, threading, time, warnings
from concurrent.futures.thread import BrokenThreadPool
from priority_executor import PriorityThreadPoolExecutor

busy = PriorityThreadPoolExecutor(max_workers=1)
unused = PriorityThreadPoolExecutor(max_workers=1)  # has never started a thread
started, release = threading.Event(), threading.Event()

def blocker():
    started.set()
    assert release.wait(TIMEOUT)

busy.submit(blocker)
assert started.wait(TIMEOUT)
busy.submit(print, "queued in the parent ran in the parent", flush=True)
with warnings.catch_warnings():
    # Python 3.12+ warns about forking a multi-threaded process: that is the point.
    warnings.simplefilter("ignore", DeprecationWarning)
    pid = os.fork()
if pid == 0:
    signal.alarm(int(TIMEOUT))  # a hung child dies instead of hanging its parent
    begun = time.monotonic()
    idle = busy.join(timeout=TIMEOUT / 2)
    print("child join:", idle, time.monotonic() - begun < TIMEOUT / 4, flush=True)
    stats = busy.statistics()
    print("child queued, running:", stats.queued, stats.running, flush=True)
    try:
        busy.submit(print, "child")
    except BrokenThreadPool as exc:
        print("child submit:", exc, flush=True)
    busy.shutdown(wait=True)
    print("child unused pool:", unused.submit(abs, -3).result(TIMEOUT), flush=True)
    unused.shutdown(wait=True)
    sys.exit(0)  # a normal interpreter exit, with its exit hooks
_, status = os.waitpid(pid, 0)
print("child exit status:", os.waitstatus_to_exitcode(status), flush=True)
release.set()
busy.shutdown(wait=True)
unused.shutdown(wait=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_pool_inherited_across_fork_refuses_work_and_join_returns_at_once() -> None:
    # No faulthandler watchdog: its helper thread does not survive fork. The child has an
    # alarm; the parent, run_script's timeout.
    result = run_script(INHERITED_POOL_SCRIPT, watchdog=False)
    assert (result.returncode, result.stdout.splitlines(), result.stderr) == (
        0,
        [
            "child join: True True",
            "child queued, running: 0 0",
            f"child submit: {FORKED_MESSAGE}",
            "child unused pool: 3",
            "child exit status: 0",
            "queued in the parent ran in the parent",
        ],
        "",
    )


def test_a_task_queued_at_exit_can_still_use_a_standard_pool() -> None:
    # The package's exit hook runs before the standard pools', whatever the import order (a new
    # module can change it), so a task that drains at exit finds its ThreadPoolExecutor still
    # open.
    result = run_script(
        """
        from priority_executor import PriorityThreadPoolExecutor
        from concurrent.futures import ThreadPoolExecutor
        """,
        EXITING,
        """
        helper = ThreadPoolExecutor(1)
        helper.submit(str, 0).result(TIMEOUT)  # from 3.12 on, no thread can start at exit
        pool = PriorityThreadPoolExecutor(1)
        pool.submit(exiting.wait, TIMEOUT)  # busy until the interpreter exits

        def task():
            print("helper says", helper.submit(str, 42).result(TIMEOUT), flush=True)

        pool.submit(task)
        """,
    )
    assert_clean_exit(result, ["helper says 42"])
