"""Context variables: the pool's threads start empty, and ``copy_context=True`` carries them.

A new thread starts in an empty ``contextvars`` context, except where Python makes it
inherit its starter's (free-threaded 3.14, ``Thread(context=...)``, or an instrumentation
that wraps ``Thread.run``). A pool's worker is started by whichever ``submit`` found the pool
short of threads, so inheriting would hand that one caller's context (a request id, a user,
a tracing span) to every later task the worker runs, whoever submitted it. So every thread
the pool starts runs its body in a fresh, empty :class:`contextvars.Context`, on every
Python: a worker's tasks see only what its initializer and earlier tasks set there, as in
the standard pool without inheritance.

``copy_context=True`` runs each task in a copy of its submitter's context instead, taken at
``submit``, as ``asyncio.to_thread`` does: tracing spans and request-scoped values follow the
task, and what the task sets stays in its own copy. The copy rides in a :class:`InContext`
wrapper in place of the callable, so a pool without the option pays nothing per task and
queued entries keep their size.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any


def fresh_thread(name: str, target: Callable[..., object], **kwargs: Any) -> threading.Thread:
    """A thread (not started) that runs ``target(**kwargs)`` in a new, empty context."""
    return threading.Thread(
        name=name, target=contextvars.Context().run, args=(target,), kwargs=kwargs
    )


class InContext:
    """A task's callable with the context it must run in; calling it runs the callable there."""

    __slots__ = ("context", "fn")

    def __init__(self, context: contextvars.Context, fn: Callable[..., Any]) -> None:
        self.context = context
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.context.run(self.fn, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<InContext {self.fn!r}>"
