"""An `input_fn` that returns tensors, run as TF1 ran it: in its own graph, by a Session.

TF1 programs often end `input_fn` with
`tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()` (or
`dataset.make_one_shot_iterator()`, `make_initializable_iterator`, queue
runners) and return the tensors. In the original's graph every
`session.run` of a step evaluated them again, so each step got the next
batch, and the input ended with `OutOfRangeError`. Run eagerly, the same code
returns the first batch's values, and repeating them trains on one batch.

So here `input_fn` is called (again) inside a `tf.Graph`, and the library is
fed a `tf.data.Dataset.from_generator` whose generator opens a
`tf.compat.v1.Session` on that graph, runs what a TF1 `Scaffold` ran at
session start (variable, local-variable, table and resource initializers,
or the graph's `INIT_OP` / `LOCAL_INIT_OP`), starts the graph's queue
runners, and `session.run`s the tensors until `OutOfRangeError`. The element
spec comes from the tensors' static shapes and dtypes. The first Session
opens, and reads the first batch, when the dataset is made (so an error of
the input's start keeps its type, as in TF1's first `session.run`); every
later iteration of the dataset calls `input_fn` again in a new graph, so
the input starts again from its first batch, as a dataset does. The graph
and Session are released when an iteration ends, or when a dataset that
was never iterated is dropped. Batches cross into the dataset stacked in
chunks (`GraphInput.chunks`), so the input may be read a few batches ahead
of the steps (up to 32 small batches; never past 4 MB).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

NOT_TENSORS = (
    "`input_fn` must return a tf.data.Dataset (or features / (features, labels) tensors). Received: {}."
)
_UNINITIALIZED = (
    "input_fn's tensors need an initializer that no TF1 Scaffold would run. Add it to "
    "tf.compat.v1.GraphKeys.TABLE_INITIALIZERS (tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys."
    "TABLE_INITIALIZERS, iterator.initializer)), or use tf.compat.v1.data.make_one_shot_iterator."
)


def is_tensor_input(result: Any) -> bool:
    """True when `result` (an `input_fn`'s return value) is tensors or values that convert to them.

    Example:

    ```python
    is_tensor_input(({"x": tf.ones([2, 3])}, tf.zeros([2])))   # True
    is_tensor_input(object())                                   # False
    ```
    """
    try:
        for leaf in tf.nest.flatten(result):
            if not (tf.is_tensor(leaf) or isinstance(leaf, tf.SparseTensor)):
                tf.convert_to_tensor(leaf)
    except (TypeError, ValueError):
        return False
    return True


def _check_dense(result: Any) -> None:
    for value in tf.nest.flatten(result):
        if tf.is_tensor(value) and not isinstance(value, tf.Tensor):
            raise TypeError(
                f"input_fn returned a {type(value).__name__}; the features and labels an input_fn "
                "returns as tensors must be dense tensors. Convert it (tf.sparse.to_dense) in input_fn."
            )


def _graph_tensor(value: Any, graph: tf.Graph) -> tf.Tensor:
    """`value` as a dense tensor of `graph` (eager tensors and NumPy values become constants)."""
    if isinstance(value, tf.Tensor) and getattr(value, "graph", None) is graph:
        return value
    if hasattr(value, "numpy"):  # an eager tensor made outside input_fn
        value = value.numpy()
    return tf.constant(np.asarray(value) if not isinstance(value, tf.Tensor) else value)


class _DropFinalizedLog(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Graph was finalized."


@contextlib.contextmanager
def _without_finalized_log() -> Iterator[None]:
    """Drops the Scaffold's INFO line 'Graph was finalized.' (it means a training graph in TF1)."""
    logger, dropping = tf.get_logger(), _DropFinalizedLog()
    logger.addFilter(dropping)
    try:
        yield
    finally:
        logger.removeFilter(dropping)


class GraphInput:
    """The graph an `input_fn` built, with its tensors and a Session to run them.

    Args:
        build: Calls `input_fn` (its result: a `(features, labels)` tuple,
            features alone, or a dataset) while a fresh graph is the default.

    Example:

    ```python
    def input_fn(params):
        dataset = tf.data.Dataset.range(5).batch(2)
        return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()

    GraphInput(lambda: input_fn({})).dataset()   # batches [0, 1], [2, 3], [4]
    ```
    """

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self.graph = tf.Graph()
        with self.graph.as_default():
            result = build()
            self.from_dataset = isinstance(result, tf.data.Dataset)
            iterator = None
            if self.from_dataset:  # an input_fn that only builds in a graph, returning a dataset
                iterator = tf.compat.v1.data.make_initializable_iterator(result)
                result = iterator.get_next()
            if isinstance(result, tuple) and len(result) != 2:
                raise ValueError(
                    "input_fn should return (features, labels) as a len 2 tuple. "
                    f"Received a tuple of {len(result)} items."
                )
            if isinstance(result, tuple) and result[1] is None:
                result = result[0]  # (features, None): features only
            _check_dense(result)
            try:
                self.structure = tf.nest.map_structure(lambda t: _graph_tensor(t, self.graph), result)
            except (TypeError, ValueError) as error:
                raise TypeError(NOT_TENSORS.format(type(result).__name__)) from error
            self.fetches = tf.nest.flatten(self.structure)
            scaffold = tf.compat.v1.train.Scaffold()
            with _without_finalized_log():
                scaffold.finalize()  # TF1's session-start ops; also finalizes the graph
            self.init_ops = [scaffold.init_op, scaffold.local_init_op]
            if iterator is not None:
                self.init_ops.append(iterator.initializer)
            self.queue_runners = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        self._session_class = tf.compat.v1.Session  # bound now: the generator runs on tf.data's threads

    @property
    def element_spec(self) -> Any:
        """`TensorSpec`s of the tensors, from their static shapes and dtypes."""
        return tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), self.structure)

    def _start(self) -> _SessionRun:
        return _SessionRun(self._session_class, self.graph, self.init_ops, self.queue_runners)

    def _next(self, run: _SessionRun) -> Any:
        """The next values (a flat list of arrays), or `_END` at `OutOfRangeError`."""
        try:
            return [np.asarray(value) for value in run.fetch(self.fetches)]  # a string scalar comes as bytes
        except tf.errors.OutOfRangeError:
            return _END
        except tf.errors.FailedPreconditionError as error:
            raise type(error)(error.node_def, error.op, f"{error.message}\n{_UNINITIALIZED}") from error

    def chunks(self, run: _SessionRun | None = None, values: Any = None) -> Iterator[Any]:
        """Runs the tensors in a Session (a new one, or `run` with its first `values`) until `OutOfRangeError`.

        Yields the results stacked in chunks of batches of equal shapes: one
        for the first batch, then up to twice as many each time, to
        `_CHUNK_BATCHES` and `_CHUNK_BYTES` (a Python call into a dataset
        costs about 0.5 ms, `session.run` 0.15 ms; `dataset()` unbatches).
        """
        run = run or self._start()
        try:
            pending = self._next(run) if values is None else values
            limit = 1
            while pending is not _END:
                chunk, pending = [pending], _UNREAD
                shapes = [value.shape for value in chunk[0]]
                size = sum(value.nbytes for value in chunk[0])
                while len(chunk) < limit and (len(chunk) + 1) * size <= _CHUNK_BYTES:
                    pending = self._next(run)
                    if pending is _END or [value.shape for value in pending] != shapes:
                        break
                    chunk.append(pending)
                    pending = _UNREAD
                yield tf.nest.pack_sequence_as(self.structure, [np.stack(parts) for parts in zip(*chunk, strict=True)])
                limit = min(2 * limit, _CHUNK_BATCHES)
                if pending is _UNREAD:
                    pending = self._next(run)
        finally:
            run.close()

    def dataset(self) -> tf.data.Dataset:
        """A `tf.data.Dataset` of the tensors' successive values (see `chunks`).

        The Session opens and the first values are read here, so an error of
        the input's start (an iterator no initializer ran) is raised here
        with its own type; inside the dataset TensorFlow reports every
        Python error as an `UnknownError`.
        """
        run = self._start()
        try:
            values = self._next(run)
        except BaseException:
            run.close()
            raise
        generator = _Generator(self._build, (self, run, values))
        chunk_spec = tf.nest.map_structure(
            lambda spec: tf.TensorSpec(tf.TensorShape([None]).concatenate(spec.shape), spec.dtype),
            self.element_spec,
        )
        dataset = tf.data.Dataset.from_generator(generator, output_signature=chunk_spec)
        weakref.finalize(dataset, generator.release)  # a dataset dropped before its first iteration
        return dataset.unbatch()


_END, _UNREAD = object(), object()
_CHUNK_BATCHES = 32
_CHUNK_BYTES = 4 << 20


class _Generator:
    """What `from_generator` calls for each iteration of the dataset.

    TensorFlow keeps this object for the life of the process (its generator
    registry), so it holds the input's graph and Session only until the
    first iteration takes them; later iterations build the input again
    (`input_fn` in a new graph), so each starts from the first batch.
    """

    def __init__(self, build: Callable[[], Any], primed: tuple[GraphInput, _SessionRun, Any]):
        self._build = build
        self._primed: tuple[GraphInput, _SessionRun, Any] | None = primed

    def release(self) -> None:
        """Closes the first Session if no iteration took it."""
        primed, self._primed = self._primed, None
        if primed is not None:
            primed[1].close()

    def __call__(self) -> Iterator[Any]:
        primed, self._primed = self._primed, None
        if primed is None:
            return GraphInput(self._build).chunks()
        graph_input, run, values = primed
        return graph_input.chunks(run, values)


class _SessionRun:
    """A Session on an input graph after TF1's session start: initializers run, queue runners started."""

    def __init__(self, session_class: type, graph: tf.Graph, init_ops: list, queue_runners: list):
        self.session = session_class(graph=graph, config=tf.compat.v1.ConfigProto(allow_soft_placement=True))
        self._coordinator, self._threads, self._closed, self._callable = None, [], False, None
        try:
            for op in init_ops:
                if op is not None:
                    self.session.run(op)
            if queue_runners:
                self._coordinator = tf.compat.v1.train.Coordinator()
                with graph.as_default():  # refused in eager mode, which tf.data's threads run in
                    self._threads = tf.compat.v1.train.start_queue_runners(self.session, self._coordinator)
        except BaseException:
            self.close()
            raise

    def fetch(self, fetches: list) -> list:
        """`session.run(fetches)`, through a callable made once (a third of session.run's overhead)."""
        if self._callable is None:
            self._callable = self.session.make_callable(fetches)
        return self._callable()

    def close(self) -> None:
        """Stops the queue runners and closes the Session (once)."""
        if self._closed:
            return
        self._closed = True
        if self._coordinator is not None:
            self._coordinator.request_stop()
            self._coordinator.join(self._threads, stop_grace_period_secs=10, ignore_live_threads=True)
        self.session.close()
