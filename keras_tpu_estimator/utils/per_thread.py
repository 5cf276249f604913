"""Containers whose contents belong to the thread that uses them.

`MirroredStrategy` traces every replica into one graph, one thread per
replica; TF1 code keeps per-graph state (collections, layer-name counters)
that must stay per replica. `_compat` installs these in place of that state.
Plain Python: no TensorFlow here.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any


class PerThreadList(list):
    """A list (a graph collection) whose items are private to the thread that added them.

    Each thread starts from the items present when the collection was
    installed. The list's own storage stays empty; every accessor reads the
    calling thread's items.

    Example:

    ```python
    import threading

    losses = PerThreadList([])
    losses.append("main thread's loss")      # seen only by this thread
    other = threading.Thread(target=lambda: losses.append("other thread's loss"))
    other.start()
    other.join()
    assert list(losses) == ["main thread's loss"]
    ```
    """

    def __init__(self, initial: list):
        super().__init__()
        self._initial = list(initial)
        self._by_thread: dict[int, list] = {}

    def _items(self) -> list:
        return self._by_thread.setdefault(threading.get_ident(), list(self._initial))

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items()))

    def __len__(self) -> int:
        return len(self._items())

    def __getitem__(self, index: Any) -> Any:
        return self._items()[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._items()[index] = value

    def __delitem__(self, index: Any) -> None:
        del self._items()[index]

    def __contains__(self, item: Any) -> bool:
        return item in self._items()

    def __repr__(self) -> str:
        return repr(self._items())

    def append(self, item: Any) -> None:
        self._items().append(item)

    def extend(self, items: Any) -> None:
        self._items().extend(items)

    def append_everywhere(self, item: Any) -> None:
        """Appends `item` for every thread, present and future (what a `merge_call` adds for all replicas)."""
        self._initial.append(item)
        for items in self._by_thread.values():
            items.append(item)

    def insert(self, index: Any, item: Any) -> None:
        self._items().insert(index, item)

    def remove(self, item: Any) -> None:
        self._items().remove(item)

    def pop(self, index: Any = -1) -> Any:
        return self._items().pop(index)

    def clear(self) -> None:
        self._items().clear()

    def index(self, item: Any, *args: Any) -> int:
        return self._items().index(item, *args)

    def copy(self) -> list:
        return list(self._items())


class PerThreadCounts(dict):
    """A `defaultdict(int)` whose counts belong to the thread that uses them.

    Example:

    ```python
    counts = PerThreadCounts()
    counts["dense"] += 1     # 1 in this thread, 0 in any other
    ```
    """

    def __init__(self) -> None:
        super().__init__()
        self.by_thread: dict[int, collections.defaultdict] = {}

    def _counts(self) -> collections.defaultdict:
        return self.by_thread.setdefault(threading.get_ident(), collections.defaultdict(int))

    def __getitem__(self, key: Any) -> int:
        return self._counts()[key]

    def __setitem__(self, key: Any, value: int) -> None:
        self._counts()[key] = value

    def __contains__(self, key: Any) -> bool:
        return key in self._counts()

    def get(self, key: Any, default: Any = None) -> Any:
        return self._counts().get(key, default)
