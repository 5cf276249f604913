"""TODO utils."""

from .logs import (
    get_logger,
)
from .per_thread import (
    PerThreadCounts,
    PerThreadList,
)
from .source_lines import (
    user_line,
)

__all__ = [
    "PerThreadCounts",
    "PerThreadList",
    "get_logger",
    "user_line",
]
