"""TODO migration."""

from .install import (
    install,
    installed,
)

__all__ = [
    "install",
    "installed",
]
