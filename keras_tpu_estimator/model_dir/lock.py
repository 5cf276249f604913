"""One writer per `model_dir`: a lock file that a second trainer finds at start.

Two trainers on one model_dir both used to exit 0, each writing checkpoints
over the other's. `ModelDirLock` makes the second one fail at start instead,
with an error naming the first (host, pid, start time).

Protocol:

* The trainer creates `<model_dir>/keras_tpu_estimator.lock` (`LOCK_FILE`) with
  `os.open(O_CREAT | O_EXCL)`, which is atomic on local disks and on NFSv3 and
  later, and writes JSON into it: `host`, `pid`, `started` (unix time),
  `started_text` (local ISO time), `heartbeat` (unix time) and a random `token`.
* While held, a daemon thread rewrites the heartbeat every `HEARTBEAT_SECONDS`
  (a temporary file in model_dir moved over the lock with `os.replace`, so a
  reader never sees half a file), as long as the token in the file is its own.
  If another process took the lock over, it stops and logs an ERROR once.
* A trainer that finds a lock file takes it over (deletes it and retries the
  create once) only when its holder is this process (a `fit` that raised in
  a notebook), or is dead (same host, and its pid does not exist), or is stale
  (the newer of the file's mtime and its JSON heartbeat is older than
  `STALE_AFTER_SECONDS`); each takeover logs why. A file that cannot be parsed
  (being written) is held while its mtime is fresh. Otherwise it raises
  `ModelDirLockedError`.
* `release()` stops the heartbeat and deletes the file if the token is its own.

Readers take no lock: evaluators (the `train_and_evaluate` pattern), predict,
export and TensorBoard read model_dir while a trainer writes it.

Limits:

* `STALE_AFTER_SECONDS` (120 s): a holder on another host that died is taken
  over 2 minutes after its last heartbeat; until then the new trainer fails.
  It exceeds NFS's default attribute cache (60 s) plus a heartbeat, so a live
  holder seen through NFS looks fresh. A trainer whose heartbeat stalls longer
  can lose its lock (it logs an ERROR when it notices).
* NFS: `O_EXCL` is atomic on NFSv3+ only (not NFSv2 or some FUSE filesystems).
* Hosts are told apart by `socket.gethostname()`: machines sharing a hostname
  and a model_dir may take each other's locks as dead; give them distinct names.
* Object stores (`gs://`, `s3://`, `hdfs://`, `ram://`, any path with `://`)
  have no atomic create-if-absent through this API: no lock is taken, a
  WARNING says that only one trainer may write to model_dir.
* Two trainers taking over the same stale lock at once: one wins the create and
  the other raises; the file is re-read just before deletion to keep a fresh
  lock from being deleted, which narrows (not closes) that window.

Example:

```python
with ModelDirLock(model_dir) as lock:   # another trainer's acquire() now raises ModelDirLockedError
    assert lock.held                     # write model_dir here
assert not os.path.exists(lock.path)
```
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from keras_tpu_estimator.utils import get_logger

LOCK_FILE = "keras_tpu_estimator.lock"
HEARTBEAT_SECONDS = 15.0
STALE_AFTER_SECONDS = 120.0
_log = get_logger(__name__)
# Locks this process holds, by token: a takeover of this process's own lock stops its heartbeat.
_HELD: dict[str, ModelDirLock] = {}
_HELD_GUARD = threading.Lock()


class ModelDirLockedError(RuntimeError):
    """Another trainer holds the lock on `model_dir`; the holder is in the attributes.

    Example:

    ```python
    import json
    import time

    with open(os.path.join(model_dir, LOCK_FILE), "w") as file:   # a live trainer on another host
        json.dump({"host": "tpu-vm-2", "pid": 7, "started_text": "09:00", "heartbeat": time.time()}, file)
    lock = ModelDirLock(model_dir)
    try:
        lock.acquire()
    except ModelDirLockedError as e:
        print(e.host, e.pid, e.started_text, e.heartbeat_age)   # tpu-vm-2 7 09:00 0.0
    ```
    """

    def __init__(
        self, model_dir: str, lock_path: str, holder: dict[str, Any] | None, heartbeat_age: float
    ) -> None:
        holder = holder or {}
        self.model_dir = model_dir
        self.lock_path = lock_path
        self.host: str = str(holder.get("host", "unknown"))
        self.pid: int | None = holder.get("pid") if isinstance(holder.get("pid"), int) else None
        self.started: float | None = _number(holder.get("started"))
        self.started_text: str = str(holder.get("started_text", "unknown"))
        self.heartbeat_age = heartbeat_age
        who = (
            f"host {self.host}, pid {self.pid}, started {self.started_text}"
            if holder else "a lock file that cannot be read yet"
        )
        super().__init__(
            f"model_dir {model_dir} is being written by another trainer ({who}; "
            f"last heartbeat {heartbeat_age:.0f} s ago). Two trainers on one model_dir overwrite "
            "each other's checkpoints. Stop that trainer, use another model_dir, or delete "
            f"{lock_path} if you are sure it is not running (a lock whose heartbeat is older than "
            f"{STALE_AFTER_SECONDS:.0f} s is taken over automatically). Evaluators and predict "
            "do not need the lock."
        )


class ModelDirLock:
    """Holds `model_dir` for one trainer: `acquire()` / `release()`, or a `with` block.

    Raises `ModelDirLockedError` from `acquire()` when another live trainer holds it.
    On object stores (`gs://`, ...) it logs a WARNING and holds nothing.

    Example:

    ```python
    lock = ModelDirLock(model_dir)
    lock.acquire()
    try:
        assert lock.held   # write model_dir here
    finally:
        lock.release()
    ```
    """

    def __init__(self, model_dir: str | os.PathLike[str]) -> None:
        self.model_dir = os.fspath(model_dir)
        self.path = os.path.join(self.model_dir, LOCK_FILE)
        self._remote = "://" in self.model_dir
        self._warned = False
        self._token: str | None = None
        self._contents: dict[str, Any] = {}
        self._lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock (never on object stores)."""
        return self._token is not None and not self._lost

    def __enter__(self) -> ModelDirLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def acquire(self) -> ModelDirLock:
        """Takes the lock (creating model_dir if missing) and starts the heartbeat.

        Example:

        ```python
        lock = ModelDirLock(model_dir).acquire()
        ```
        """
        if self._remote:
            if not self._warned:
                self._warned = True
                _log.warning(
                    "model_dir %s is not a local or NFS path: a lock cannot be held on that "
                    "filesystem, so nothing stops a second trainer. Only one trainer may write "
                    "to model_dir.", self.model_dir,
                )
            return self
        if self.held:
            return self
        self.release()  # A lock this object lost to another process: forget it.
        if os.path.exists(self.model_dir) and not os.path.isdir(self.model_dir):
            raise ValueError(
                f"model_dir {self.model_dir} is a file, not a directory: pass a directory path."
            )
        os.makedirs(self.model_dir, exist_ok=True)
        token = uuid.uuid4().hex
        if not self._create(token):
            raw, holder, age = self._read()
            if raw is not None:
                reason = self._takeover_reason(holder, age)
                if reason is None:
                    raise ModelDirLockedError(self.model_dir, self.path, holder, age)
                self._take_over(raw, holder, reason)
            if not self._create(token):  # Another process won the race.
                _, holder, age = self._read()
                raise ModelDirLockedError(self.model_dir, self.path, holder, age)
        self._token, self._lost = token, False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(token, self._stop), name=f"lock {self.path}", daemon=True
        )
        self._thread.start()
        with _HELD_GUARD:
            _HELD[token] = self
        atexit.register(self.release)
        return self

    def release(self) -> None:
        """Stops the heartbeat and deletes the lock file if it is still ours. Idempotent.

        Example:

        ```python
        lock = ModelDirLock(model_dir)
        lock.acquire()
        lock.release()
        lock.release()   # idempotent
        assert not os.path.exists(lock.path)
        ```
        """
        token = self._token
        if token is None:
            return
        self._stop_heartbeat()
        self._token = None
        with _HELD_GUARD:
            _HELD.pop(token, None)
        atexit.unregister(self.release)
        _, holder, _ = self._read()
        if holder and holder.get("token") == token:
            _remove(self.path)
        elif not self._lost:
            self._report_lost(holder)
        _remove(self._temporary_path(token))

    def _create(self, token: str) -> bool:
        """Creates the lock file with our JSON; False if it exists."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        now = time.time()
        started_text = datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds")
        self._contents = {
            "host": socket.gethostname(), "pid": os.getpid(), "started": now,
            "started_text": started_text, "heartbeat": now, "token": token,
        }
        with os.fdopen(fd, "w") as f:
            json.dump(self._contents, f)
            f.flush()
            os.fsync(f.fileno())
        return True

    def _read(self) -> tuple[bytes | None, dict[str, Any] | None, float]:
        """(raw bytes or None if absent, parsed JSON or None, seconds since the last heartbeat)."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
                mtime = os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None, None, 0.0
        try:
            holder = json.loads(raw)
        except ValueError:
            holder = None
        if not isinstance(holder, dict):
            holder = None
        beat = max(mtime, _number(holder.get("heartbeat")) or 0.0) if holder else mtime
        return raw, holder, max(0.0, time.time() - beat)

    @staticmethod
    def _takeover_reason(holder: dict[str, Any] | None, age: float) -> str | None:
        """Why the lock may be taken over, or None if its holder counts as running."""
        stale = age > STALE_AFTER_SECONDS
        if holder is None:
            return f"it cannot be parsed and is {age:.0f} s old" if stale else None
        pid = holder.get("pid")
        if holder.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0:
            if pid == os.getpid():
                return "this process left it (an earlier run that did not release it)"
            if not _alive(pid):
                return f"process {pid} no longer exists on this host"
        if stale:
            return f"its heartbeat is {age:.0f} s old (more than {STALE_AFTER_SECONDS:.0f} s)"
        return None

    def _take_over(self, raw: bytes, holder: dict[str, Any] | None, reason: str) -> None:
        """Logs the takeover and deletes the file, if it still is the one judged."""
        who = (
            f"host {holder.get('host')}, pid {holder.get('pid')}, "
            f"started {holder.get('started_text')}" if holder else "unknown holder"
        )
        mine = holder is not None and holder.get("pid") == os.getpid()
        (_log.info if mine else _log.warning)(
            "Taking over the lock on model_dir %s from %s: %s.", self.model_dir, who, reason
        )
        if mine:
            with _HELD_GUARD:
                previous = _HELD.pop(str(holder.get("token")), None)
            if previous is not None:  # Its heartbeat would rewrite the file: stop it quietly.
                previous._lost = True
                previous._stop_heartbeat()
        if self._read()[0] == raw:
            _remove(self.path)

    def _beat(self, token: str, stop: threading.Event) -> None:
        """Heartbeat thread: rewrites `heartbeat` every HEARTBEAT_SECONDS while the token is ours."""
        temporary = self._temporary_path(token)
        contents = dict(self._contents)
        while not stop.wait(HEARTBEAT_SECONDS):
            _, holder, _ = self._read()
            if not holder or holder.get("token") != token:
                if not stop.is_set():
                    self._report_lost(holder)
                return
            contents["heartbeat"] = time.time()
            try:
                with open(temporary, "w") as f:
                    json.dump(contents, f)
                os.replace(temporary, self.path)
            except OSError as e:
                _log.warning("Could not write the heartbeat of %s: %s", self.path, e)

    def _report_lost(self, holder: dict[str, Any] | None) -> None:
        if self._lost:
            return
        self._lost = True
        who = (
            f"host {holder.get('host')}, pid {holder.get('pid')}"
            if holder else "an unknown process (the file is missing or unreadable)"
        )
        _log.error(
            "The lock on model_dir %s is no longer this trainer's: it is now held by %s. Another "
            "trainer may be writing to model_dir; this one stopped its heartbeat.",
            self.model_dir, who,
        )

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._thread = None

    def _temporary_path(self, token: str) -> str:
        return f"{self.path}.{token}.tmp"


def _alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Exists, owned by another user.
        return True
    return True


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
