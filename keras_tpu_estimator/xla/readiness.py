"""The TPU-readiness check: will a `model_fn` compile for a TPU? Answered on any machine.

`check_model(scratch, input_fn, modes, cores)` takes a *scratch* model (a
fresh `EstimatorModel` of the same `model_fn`, params and config on the
default strategy, made by `EstimatorModel.check_tpu_compatibility`), so the
user's model, its variables, global step and `model_dir` are never touched.
For each mode it builds the replica step the strategy path runs, with the
shapes a TPU core gets: the per-core batch is the mode's global batch over
`cores` (`TPUConfig.num_shards`, else 8: one TPU v2-8 / v3-8 host), EVAL and
PREDICT padded to it (`inputs/padding.py`) as every strategy-path step is. Then it
compiles that step with XLA (`tf.function(jit_compile=True)`, HLO only: no
step runs) and reports what a TPU would refuse:

- dynamic shapes, with the original's text (`The features to the model
  returned by input_fn must have static shape.`) and the fix;
- host-only ops in the step (`tf.py_function`, `tf.numpy_function`) and
  string ops, with the `model_fn` line that made them: move them to
  `host_call` or `tf.compat.v1.tpu.outside_compilation`;
- ops XLA has no kernel for (when the compile fails), with their line;
- any other XLA compile error, trimmed;
- as *warnings* (they leave `ok` True, as the original TPU ran such
  programs): int64 / float64 tensors of more than one element that
  `model_fn` makes, and 64-bit inputs. A TPU has no 64-bit units.

XLA here is XLA's CPU compiler: a TPU's kernel set is almost the same, but
not exactly; a clean report means the step's graph is XLA-compilable with
static shapes, the main reasons a TPU program fails to build.

Example:

```python
model = kte.EstimatorModel(model_fn, train_batch_size=8, eval_batch_size=8, predict_batch_size=8)
report = model.check_tpu_compatibility(input_fn)   # 8 cores: a batch of 1 each
print(report)          # each mode with its compiled size, or the problems and their fixes
assert report.ok
```
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tensorflow as tf

from keras_tpu_estimator._compat.xla_check import (
    fetched_with_ops,
    hlo_text,
    missing_xla_kernel,
    outside_compilation_on_host,
)
from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.inputs import unpack
from keras_tpu_estimator.tf1 import per_replica_collections
from keras_tpu_estimator.utils import user_line

DEFAULT_TPU_CORES = 8
"""Cores assumed when `TPUConfig.num_shards` is unset: one TPU v2-8 / v3-8 host."""

_MODES = {"train": ModeKeys.TRAIN, "eval": ModeKeys.EVAL, "predict": ModeKeys.PREDICT, "infer": ModeKeys.PREDICT}
_SHOWN = {ModeKeys.PREDICT: "predict"}
_HOST_ONLY = {"EagerPyFunc": "tf.py_function", "PyFunc": "tf.numpy_function", "PyFuncStateless": "tf.numpy_function"}
_NOT_COMPUTATION = frozenset({"Placeholder", "NoOp", "Const", "Identity", "Assert"})
_SIXTY_FOUR = (tf.int64, tf.float64)
_MAX_LISTED = 5
@dataclasses.dataclass(frozen=True)
class TPUCompatibilityReport:
    """What `check_tpu_compatibility` found.

    Attributes:
        modes: The modes checked (`ModeKeys` values: "train", "eval", "infer").
        problems: `(mode, message)` pairs: what a TPU would refuse, each message
            naming the problem and its fix.
        warnings: `(mode, message)` pairs that do not stop a TPU (64-bit types).
        program_sizes: `(mode, HLO instructions)` of each mode that compiled.
        per_core_batch: `(mode, rows)`: the static batch each TPU core's step got.
        cores: The TPU cores assumed (`TPUConfig.num_shards`, else 8).

    Example:

    ```python
    report = model.check_tpu_compatibility(input_fn, modes=["train"])
    report.ok, report.problems, report.program_size("train")   # True, (), 97 (the README model)
    ```
    """

    modes: tuple[str, ...]
    problems: tuple[tuple[str, str], ...] = ()
    warnings: tuple[tuple[str, str], ...] = ()
    program_sizes: tuple[tuple[str, int], ...] = ()
    per_core_batch: tuple[tuple[str, int | None], ...] = ()
    cores: int = DEFAULT_TPU_CORES

    @property
    def ok(self) -> bool:
        """True when no mode has a problem (warnings allowed)."""
        return not self.problems

    def program_size(self, mode: str) -> int | None:
        """The HLO instruction count of `mode`'s compiled step, or None (not compiled)."""
        return dict(self.program_sizes).get(_MODES.get(mode, mode))

    def __str__(self) -> str:
        verdict = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        lines = [f"TPU compatibility: {verdict} ({self.cores} TPU cores; XLA-compiled on this machine)"]
        batches = dict(self.per_core_batch)
        for mode in self.modes:
            size = self.program_size(mode)
            batch = batches.get(mode)
            shape = f"per-core batch {batch}" + (" (padded)" if mode != ModeKeys.TRAIN else "") if batch else "no batch"
            compiled = f"compiled, {size} HLO instructions" if size is not None else "not compiled"
            lines.append(f"  {_SHOWN.get(mode, mode)}: {shape}; {compiled}")
            lines += [f"    problem: {message}" for m, message in self.problems if m == mode]
            lines += [f"    warning: {message}" for m, message in self.warnings if m == mode]
        return "\n".join(lines)


def mode_keys(modes: str | Iterable[str]) -> tuple[str, ...]:
    """`ModeKeys` values from "train" / "eval" / "predict" (or `ModeKeys`), a string or several."""
    names = [modes] if isinstance(modes, str) else list(modes)
    unknown = [name for name in names if name not in _MODES]
    if unknown or not names:
        raise ValueError(f"modes must be among 'train', 'eval', 'predict'. Received: {modes!r}")
    return tuple(dict.fromkeys(_MODES[name] for name in names))


def tpu_cores(config: Any) -> int:
    """The TPU cores a check assumes: `TPUConfig.num_shards`, else `DEFAULT_TPU_CORES`."""
    return config.tpu_config.num_shards or DEFAULT_TPU_CORES


def _where(op: tf.Operation) -> str:
    line = user_line(op)
    return f"{op.type} op '{op.name}'" + (f" (made at {line})" if line else "")


def _listed(ops: Sequence[tf.Operation]) -> str:
    shown = ", ".join(_where(op) for op in ops[:_MAX_LISTED])
    return shown + (f" and {len(ops) - _MAX_LISTED} more" if len(ops) > _MAX_LISTED else "")


def _with_paths(nest: Any, path: str = "") -> list[tuple[str, Any]]:
    """`(path, leaf)` pairs of a nest of dicts, lists and tuples: `"['x']"`, `"[0]"`."""
    if isinstance(nest, dict):
        return [pair for key in sorted(nest) for pair in _with_paths(nest[key], f"{path}[{key!r}]")]
    if isinstance(nest, list | tuple):
        return [pair for i, item in enumerate(nest) for pair in _with_paths(item, f"{path}[{i}]")]
    return [] if nest is None else [(path, nest)]


def dynamic_shape_problems(element_spec: Any, per_core: int | None) -> tuple[list[str], Any]:
    """The original's messages for input tensors without a static shape, and the spec made static.

    The batch dimension becomes `per_core` (what `drop_remainder=True` gives);
    the static spec is None when another dimension stays unknown.
    """
    features, labels, _ = unpack(element_spec)
    messages, static_ok = [], True
    for name, spec in (("features", features), ("labels", labels)):
        for path, tensor_spec in _with_paths(spec):
            shape = tensor_spec.shape
            if shape.is_fully_defined():
                continue
            batch_only = shape.rank is not None and shape.rank > 0 and shape[1:].is_fully_defined()
            fix = (
                "Batch the dataset with `dataset.batch(params['batch_size'], drop_remainder=True)`: "
                "a TPU step has a static batch."
                if batch_only
                else "Give every dimension a fixed size (`padded_batch(..., padded_shapes=...)` with "
                "fixed sizes, or `tf.ensure_shape` in input_fn)."
            )
            static_ok = static_ok and batch_only
            label = name + path
            messages.append(
                f"The {name} to the model returned by input_fn must have static shape. "
                f"Tensor: {label} {tensor_spec}. {fix}"
            )

    def fixed(spec: Any) -> Any:
        if isinstance(spec, tf.TensorSpec) and spec.shape.rank and spec.shape[0] is None:
            return tf.TensorSpec([per_core] + spec.shape[1:].as_list(), spec.dtype, spec.name)
        return spec

    return messages, (tf.nest.map_structure(fixed, element_spec) if static_ok and per_core else None)


def _has_string(op: tf.Operation) -> bool:
    return any(t.dtype == tf.string for t in (*op.inputs, *op.outputs))


def scan_step_ops(ops: Sequence[tf.Operation]) -> tuple[list[str], list[str], list[tf.Operation]]:
    """(problems, warnings, ops with no XLA kernel) among a step's ops (`fetched_with_ops`)."""
    host_only = [op for op in ops if op.type in _HOST_ONLY]
    strings = [op for op in ops if op.type not in _HOST_ONLY and op.type not in _NOT_COMPUTATION and _has_string(op)]
    problems = []
    for kind in dict.fromkeys(_HOST_ONLY[op.type] for op in host_only):
        ops_of_kind = [op for op in host_only if _HOST_ONLY[op.type] == kind]
        problems.append(
            f"{kind} in the step: {_listed(ops_of_kind)} runs Python on the host, which a TPU step "
            "cannot call. Move it to `host_call` (its function runs on the host with the step's "
            "tensors), wrap it in `tf.compat.v1.tpu.outside_compilation`, or do it in input_fn."
        )
    if strings:
        problems.append(
            f"String op(s) in the step: {_listed(strings)}. A TPU has no string type. Move string work "
            "to input_fn, to `host_call`, or into `tf.compat.v1.tpu.outside_compilation`."
        )
    reported = {*host_only, *strings}
    # `ops` already hold the bodies they call; XLA's CPU compiler is what the check runs.
    no_kernel = [
        op for op in ops
        if op not in reported and op.type not in _NOT_COMPUTATION and missing_xla_kernel(op, "XLA_CPU_JIT")
    ]
    warnings = []
    for dtype in _SIXTY_FOUR:
        made = [
            op for op in ops
            if op.type not in _NOT_COMPUTATION and user_line(op) and any(
                t.dtype == dtype and (t.shape.num_elements() is None or t.shape.num_elements() > 1)
                for t in op.outputs
            )
        ]
        if made:
            warnings.append(
                f"{dtype.name} tensor(s) made in the step: {_listed(made)}. A TPU has no 64-bit units "
                f"({'int64 is emulated with 32-bit ops' if dtype == tf.int64 else 'float64 is demoted or refused'}); "
                f"use {'int32' if dtype == tf.int64 else 'float32'} (`tf.cast`"
                + (", `tf.argmax(..., output_type=tf.int32)`)." if dtype == tf.int64 else ").")
            )
    return problems, warnings, no_kernel


def string_input_problems(element_spec: Any) -> list[str]:
    """String features or labels: a TPU step cannot take them."""
    named = [
        f"{name}{path}"
        for name, part in zip(("features", "labels"), unpack(element_spec)[:2], strict=True)
        for path, spec in _with_paths(part)
        if isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string
    ]
    if not named:
        return []
    return [
        f"String input(s): {', '.join(named)}. A TPU has no string type: turn them into numbers in "
        "input_fn (`tf.strings.to_hash_bucket_fast`, a `tf.lookup` table, `tf.io.decode_raw`)."
    ]


def input_warnings(element_spec: Any) -> list[str]:
    """64-bit inputs (int64 labels from NumPy are common): a warning naming them."""
    wide = [
        f"{name}{path} ({spec.dtype.name})"
        for name, part in zip(("features", "labels"), unpack(element_spec)[:2], strict=True)
        for path, spec in _with_paths(part)
        if isinstance(spec, tf.TensorSpec) and spec.dtype in _SIXTY_FOUR
    ]
    if not wide:
        return []
    return [
        f"64-bit input(s): {', '.join(wide)}. A TPU computes them in 32 bits or emulates them; cast "
        "them in input_fn (`dataset.map(lambda f, l: (f, tf.cast(l, tf.int32)))`)."
    ]


def trimmed_compile_error(error: Exception, ops: Sequence[tf.Operation] = ()) -> str:
    """XLA's message, without the dump advice and the copy's traceback; with the op's `model_fn` line."""
    text = str(error).replace("Failed getting HLO text: ", "").strip("'\" ")
    text = re.split(r"\n?\s*(?:The op is created at:|Stack trace for op definition:)|\n\s*tf2xla conversion failed", text)[0]
    text = " ".join(text.split())
    text = text if len(text) <= 400 else text[:397] + "..."
    named = re.search(r"node `([^`]+)`|\{\{node ([^}]+)\}\}", text)
    op = named and next((o for o in ops if o.name == (named.group(1) or named.group(2))), None)
    line = op is not None and user_line(op)
    return text + (f" (the op was made at {line})" if line else "")


def _step_of(scratch: Any, mode: str) -> tuple[Callable, Callable | None]:
    runner = scratch._runner
    if mode == ModeKeys.TRAIN:
        tail = runner.apply_keras_optimizer if runner.uses_keras_optimizer else None
        return runner.train_step, tail
    return (runner.test_step if mode == ModeKeys.EVAL else runner.predict_step), None


def check_mode(scratch: Any, input_fn: Any, mode: str) -> tuple[list, list, int | None, int | None]:
    """One mode: (problems, warnings, HLO instructions or None, per-core batch or None)."""
    runner = scratch._runner
    try:
        runner.distribute_input(input_fn, mode)
    except Exception as error:  # what the build refused: the library's (the original's) text
        return [f"{type(error).__name__}: {error}"], [], None, None
    record = runner.modes[mode]
    per_core = record.batch.per_replica
    problems, static = dynamic_shape_problems(record.element_spec, per_core)
    warnings = input_warnings(record.element_spec)
    strings = string_input_problems(record.element_spec)
    problems += strings
    if static is None or strings:
        return problems, warnings, None, per_core
    record.element_spec = static  # the steps' `_static` gives the placeholders these shapes
    step, tail = _step_of(scratch, mode)
    seen: list = []

    def program(data: Any) -> Any:
        with runner.store.scope(), per_replica_collections(), outside_compilation_on_host():
            result, ops = fetched_with_ops(lambda: step(data))
            seen[:] = ops
            return result if tail is None else tail(result)

    specs = tf.nest.flatten(static)
    function = tf.function(
        lambda *flat: program(tf.nest.pack_sequence_as(static, flat)), jit_compile=True, autograph=False
    )
    try:
        function.get_concrete_function(*specs)
    except Exception as error:
        return [*problems, f"The step did not build: {type(error).__name__}: {error}"], warnings, None, per_core
    scanned, made_wide, no_kernel = scan_step_ops(seen)
    problems += scanned
    warnings += made_wide
    try:
        hlo = hlo_text(function, specs)
    except Exception as error:  # XLA refused the step
        if no_kernel:
            problems.append(
                f"No XLA kernel for {_listed(no_kernel)}: XLA (and a TPU) cannot compile it. Compute it "
                "in input_fn, move it to `host_call` / `outside_compilation`, or use an op XLA supports."
            )
        elif not scanned:
            problems.append(f"XLA could not compile the step: {trimmed_compile_error(error, seen)}")
        return problems, warnings, None, per_core
    size = len(re.findall(r"^\s*(?:ROOT )?%\S+ = ", hlo, flags=re.MULTILINE))
    return problems, warnings, size, per_core


def check_model(scratch: Any, input_fn: Any, modes: str | Iterable[str], cores: int) -> TPUCompatibilityReport:
    """Checks each of `modes` on `scratch` (a throwaway model, released at the end); returns the report."""
    keys = mode_keys(modes)
    problems, warnings, sizes, batches = [], [], [], []
    try:
        for mode in keys:
            with outside_compilation_on_host():  # the build traces model_fn too
                found, warned, size, per_core = check_mode(scratch, input_fn, mode)
            problems += [(mode, message) for message in found]
            warnings += [(mode, message) for message in warned]
            batches.append((mode, per_core))
            if size is not None:
                sizes.append((mode, size))
    finally:
        scratch.release_host()
    return TPUCompatibilityReport(keys, tuple(problems), tuple(warnings), tuple(sizes), tuple(batches), cores)


def scratch_config(config: Any) -> Any:
    """The user's config for a scratch model: no seeding of the process, no shard check against 1 replica."""
    return config.replace(tf_random_seed=None, tpu_config=config.tpu_config.replace(num_shards=None))


__all__ = ["DEFAULT_TPU_CORES", "TPUCompatibilityReport", "check_model", "mode_keys", "scratch_config", "tpu_cores"]
