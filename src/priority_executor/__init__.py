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
from ._alimiter import AsyncPriorityLimiter
from ._delegating import PriorityExecutor
from ._distribution import Distribution
from ._executor import PriorityThreadPoolExecutor
from ._futures import expired
from ._grants import LimiterStatistics
from ._limiter import PriorityLimiter
from ._listeners import ListenerHandle, TaskInfo
from ._options import PoolView
from ._policy import Priority
from ._rates import RateLimit
from ._stats import ExecutorStatistics, QueueFullError

__all__ = [
    "AsyncPriorityLimiter",
    "AsyncPriorityScheduler",
    "AsyncView",
    "Distribution",
    "ExecutorStatistics",
    "LimiterStatistics",
    "ListenerHandle",
    "PoolView",
    "Priority",
    "PriorityExecutor",
    "PriorityLimiter",
    "PriorityThreadPoolExecutor",
    "QueueFullError",
    "RateLimit",
    "TaskInfo",
    "__version__",
    "expired",
]

__version__ = "0.1.0"
