"""priority-executor: a drop-in ThreadPoolExecutor with priorities, queue deadlines and safe
cancellation.

    from priority_executor import PriorityThreadPoolExecutor, Priority

    with PriorityThreadPoolExecutor(max_workers=4) as pool:
        urgent = pool.submit(handle_request, request, priority=Priority.HIGH)
        batch = pool.submit(reindex, timeout=30.0)  # cancelled if still queued after 30 s
"""

from __future__ import annotations

from ._aio import AsyncPriorityScheduler
from ._aio_view import AsyncView
from ._delegating import PriorityExecutor
from ._distribution import Distribution
from ._executor import PriorityThreadPoolExecutor
from ._futures import expired
from ._listeners import ListenerHandle, TaskInfo
from ._options import PoolView
from ._policy import Priority
from ._rates import RateLimit
from ._stats import ExecutorStatistics, QueueFullError

__all__ = [
    "AsyncPriorityScheduler",
    "AsyncView",
    "Distribution",
    "ExecutorStatistics",
    "ListenerHandle",
    "PoolView",
    "Priority",
    "PriorityExecutor",
    "PriorityThreadPoolExecutor",
    "QueueFullError",
    "RateLimit",
    "TaskInfo",
    "__version__",
    "expired",
]

__version__ = "0.1.0"
