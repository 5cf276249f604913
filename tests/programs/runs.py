"""The runs of the programs in this folder: each is a file written as public TPUEstimator programs are.

Every program takes `--model_dir` and `--result_file` (JSON) besides its own
flags. `scripts/record_program_results.py` runs each `Run` on the original
(TensorFlow 2.15, `use_tpu=False` as its flags say) and writes
`original_results.py`; `tests/test_programs.py` runs the same file, unchanged,
through `python -m keras_tpu_estimator` on each of `Run.paths`:

- `cpu`: the flags as recorded (`--use_tpu=false`);
- `tpu`: `--use_tpu=true`, the strategy path on the default strategy;
- `mirrored`: `--use_tpu=true` with `--replicas 2` (a MirroredStrategy over
  two logical CPUs standing in for two TPU cores).
"""

from __future__ import annotations

import dataclasses
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


# Why a result differs from the recorded one (README, "Semantics you should know").
NO_STEP_0_CHECKPOINT = "no checkpoint before the first step (README: Checkpoint timing)"
HOOKS_PER_LOOP = "on a TPU the original ran session hooks once per loop of iterations_per_loop steps"


@dataclasses.dataclass(frozen=True)
class Run:
    program: str
    flags: tuple[str, ...] = ()
    paths: tuple[str, ...] = ("cpu", "tpu", "mirrored")
    # {path or "all": {result key: (what this path gives instead, why)}}: results that differ from
    # the recorded CPU-path run by design or, on the strategy paths, as the original's TPU path did.
    differences: dict = dataclasses.field(default_factory=dict)
    # Relative tolerance of floats (same_results.RTOL unless the original itself varies more by machine).
    rtol: float = 2e-5

    def expected(self, recorded: dict, path: str) -> dict:
        """The recorded results with this path's differences applied."""
        expected = dict(recorded)
        for scope in ("all", path):
            for key, (value, _why) in self.differences.get(scope, {}).items():
                assert key in recorded, f"{self.program}: the original gave no {key!r}"
                expected[key] = value
        return expected

    @property
    def script(self) -> pathlib.Path:
        return HERE / f"{self.program}.py"


RUNS = {
    "mnist_tpu_namespace": Run(
        "mnist_tpu_namespace", differences={"all": {"checkpoints": ([8, 12], NO_STEP_0_CHECKPOINT)}}),
    # The TF1 XLA switch (session_config's global_jit_level=ON_1): XLA auto-clustering of the step here.
    "mnist_tpu_namespace_xla": Run(
        "mnist_tpu_namespace", ("--use_xla",), differences={"all": {"checkpoints": ([8, 12], NO_STEP_0_CHECKPOINT)}}),
    # Batch norm normalizes each replica's rows (as on TPU cores): one replica's numbers only.
    "resnet_graph_mode": Run("resnet_graph_mode", paths=("cpu", "tpu")),
    "resnet_graph_mode_no_bn": Run("resnet_graph_mode", ("--batch_norm=false",), paths=("mirrored",)),
    # The original itself gives this BERT run's floats up to 1.2e-4 apart on two x86 CPUs (recorded
    # 2026-12-01 and 2026-12-02: probabilities[0][2] 0.0508258 and 0.0508320); here each matches the
    # original on its own machine within 2e-5.
    "bert_compat_v1_namespace": Run("bert_compat_v1_namespace", differences={
        path: {"hook_losses_run": (3, HOOKS_PER_LOOP)} for path in ("tpu", "mirrored")}, rtol=5e-4),
    # train_and_evaluate (facade/train_and_evaluate.py) with Latest/Best/Final exporters: every save evaluated and
    # exported, old exports collected; a second call at max_steps returns (None, None).
    "train_and_evaluate_exporters": Run("train_and_evaluate_exporters", ("--resume",), differences={
        "all": {"checkpoints": ([4, 8, 12], NO_STEP_0_CHECKPOINT)}}),
    # throttle_secs longer than the run: the first save and the last step are evaluated.
    "train_and_evaluate_throttled": Run(
        "train_and_evaluate_exporters", ("--throttle_secs=100000", "--train_steps=14"), paths=("cpu",),
        differences={"all": {"checkpoints": ([4, 8, 12, 14], NO_STEP_0_CHECKPOINT)}}),
    # tf.estimator.experimental hooks (facade/early_stopping.py), one run per step (iterations_per_loop=1).
    "early_stopping_lower_resume": Run(
        "early_stopping_hooks", ("--hook=lower", "--resume"), paths=("cpu", "tpu"),
        differences={"all": {"checkpoints": ([2, 3], NO_STEP_0_CHECKPOINT)}}),
    "early_stopping_higher": Run("early_stopping_hooks", ("--hook=higher",), paths=("cpu",), differences={
        "all": {"checkpoints": ([2, 4, 6], NO_STEP_0_CHECKPOINT)}}),
    "early_stopping_no_increase_resume": Run(
        "early_stopping_hooks", ("--hook=no_increase", "--resume"), paths=("cpu",),
        differences={"all": {"checkpoints": ([2, 4, 6, 8, 9], NO_STEP_0_CHECKPOINT)}}),
    "early_stopping_predicate": Run(
        "early_stopping_hooks", ("--hook=predicate",), paths=("cpu", "mirrored"),
        differences={"all": {"checkpoints": ([2, 3], NO_STEP_0_CHECKPOINT)}}),
    "in_memory_evaluator": Run("early_stopping_hooks", ("--hook=in_memory",), differences={
        "all": {"checkpoints": ([2, 4, 6, 8, 10, 12], NO_STEP_0_CHECKPOINT)}}),
    "stop_at_checkpoint_step": Run(
        "early_stopping_hooks", ("--hook=checkpoint_step",), paths=("cpu",),
        differences={"all": {"checkpoints": ([2, 4, 5], NO_STEP_0_CHECKPOINT)}}),
    # input_fns that return get_next() tensors. The default eval input ends with a 4-row batch:
    # on 'tpu' it is padded inside one replica (README: Padding), so that path evaluates 24 rows.
    "mnist_tensor_input": Run("mnist_tensor_input", paths=("cpu", "mirrored")),
    "mnist_tensor_input_24": Run("mnist_tensor_input", ("--eval_rows=24",), paths=("tpu",)),
    "mnist_tensor_input_graph_mode": Run("mnist_tensor_input", ("--graph_mode", "--eval_rows=24"), paths=("cpu", "tpu")),
    # The best checkpoint kept with its .meta and loaded by import_meta_graph.
    "albert_best_checkpoint": Run("albert_best_checkpoint", paths=("cpu", "mirrored")),
    "albert_best_checkpoint_graph_mode": Run("albert_best_checkpoint", ("--graph_mode",), paths=("cpu",)),
    # The plain tf.estimator.Estimator (facade/estimator.py); with --replicas=2 the program makes a
    # MirroredStrategy over 2 logical CPUs and passes it as RunConfig(train_distribute, eval_distribute).
    "plain_estimator": Run("plain_estimator", paths=("cpu",), differences={
        "all": {"checkpoints": ([4, 8, 10], NO_STEP_0_CHECKPOINT)}}),
    "plain_estimator_mirrored": Run("plain_estimator", ("--replicas=2",), paths=("cpu",), differences={
        "all": {"checkpoints": ([4, 8, 10], NO_STEP_0_CHECKPOINT)}}),
    # TPUEstimator(use_tpu=False) on RunConfig(train_distribute=MirroredStrategy over 2 CPUs), as
    # XLNet / BigBird ran on GPUs: whole batches per replica, replica 0's host_call, and a finite
    # input whose last step has fewer batches than replicas (that step does not train).
    "tpu_cpu_distribute": Run("tpu_cpu_distribute", paths=("cpu",)),
    "tpu_cpu_distribute_one_replica": Run("tpu_cpu_distribute", ("--replicas=1",), paths=("cpu",)),
    # EMA evaluation, prediction and export through scaffold_fn's Saver(ema.variables_to_restore()),
    # TF1 summaries off a TPU and a LoggingTensorHook of the global-step variable. Batch norm normalizes
    # each replica's rows: one replica's numbers only.
    "efficientnet_ema": Run("efficientnet_ema", paths=("cpu", "tpu"), differences={
        "tpu": {"summaries": ({}, "the program writes TF1 summaries only with use_tpu=False, as EfficientNet's")}}),
}
