"""`Estimator`: the plain `tf.estimator.Estimator`, on the engine `TPUEstimator` uses.

An `Estimator` program's `model_fn(features, labels, mode, params, config)`
returns an `EstimatorSpec`; its `input_fn` takes whichever of `mode`,
`params`, `config` and `input_context` it declares. Each `train`,
`evaluate` or `predict` call builds a fresh `EstimatorModel` on the CPU path
(`use_tpu=False`), as each Estimator call built a fresh graph, restores the
newest checkpoint in `model_dir` (or warm-starts) and runs `fit` /
`evaluate` / `predict` with the callbacks that save, summarise and log.

`RunConfig(train_distribute=...)` / `eval_distribute` run those modes on the
strategy's replicas, as the Estimator did: `input_fn` is called once per input
pipeline with the strategy's `InputContext`, and each replica takes whole
batches of its dataset in turn (replica 0 the first). Prediction never used a
strategy, and does not here.

`TPUEstimator` (`facade/tpu_estimator.py`) subclasses this class, as the original
did; it changes the model it builds and the checks of its arguments.

Example:

```python
def my_model_fn(features, labels, mode, params):   # returns an EstimatorSpec
    return model_fn(features, labels, mode, params).as_estimator_spec()

def my_input_fn(params):                           # the Estimator's params: no batch_size
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(4)

estimator = Estimator(my_model_fn, model_dir=model_dir, params={"learning_rate": 0.1})
estimator.train(my_input_fn, max_steps=2)
metrics = estimator.evaluate(my_input_fn, steps=1)   # {"loss": ..., "accuracy": ..., "global_step": 2}
assert metrics["global_step"] == 2 and "accuracy" in metrics
```
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator.contract import (
    InputFn,
    ModeKeys,
    ModelFn,
    RunConfig,
    function_args,
    verify_model_fn_args,
    whole_count,
)
from keras_tpu_estimator.engine import eager_call, eager_generator
from keras_tpu_estimator.export import export_saved_model
from keras_tpu_estimator.model import EstimatorModel
from keras_tpu_estimator.model_dir import (
    WarmStartSettings,
    as_warm_start_settings,
    checkpoints_newest_first,
    resolve_checkpoint_path,
)
from keras_tpu_estimator.utils import get_logger

from .calls import (
    EstimatorCalls,
    mode_strategy,
    plain_input_fn,
    plain_model_fn,
)

_log = get_logger(__name__)

# Members a subclass may redefine (the original's list, among public names).
_ALLOWED_OVERRIDES = frozenset({"model_fn", "latest_checkpoint"})


def _check_members_not_overridden(cls: type) -> None:
    """The original's rule: a subclass may not redefine the Estimator's public members."""
    if cls.__name__ == "TPUEstimator":  # owned by the library, as the original special-cased it
        return
    public = {name for name in dir(Estimator) if not name.startswith("_")}
    overridden = sorted(
        name for name in (public & set(vars(cls))) - _ALLOWED_OVERRIDES
        if getattr(Estimator, name) is not getattr(cls, name)
    )
    if overridden:
        raise ValueError(
            f"Subclasses of Estimator cannot override members of Estimator. {cls} does override "
            f"{overridden}. Configure the Estimator through model_fn instead."
        )


def _config_with_model_dir(config: RunConfig | None, model_dir: Any) -> RunConfig:
    """The Estimator's config: the default one, with `model_dir` set (else a temporary directory)."""
    if config is None:
        config = RunConfig()
        _log.info("Using default config.")
    if not isinstance(config, RunConfig):
        raise ValueError(
            f"config must be an instance of `RunConfig`, but provided {config}. Pass a "
            "keras_tpu_estimator RunConfig (tf.estimator.RunConfig after install())."
        )
    if model_dir is not None:
        model_dir = os.fsdecode(os.fspath(model_dir))
        if config.model_dir is not None and config.model_dir != model_dir:
            raise ValueError(
                "`model_dir` are set both in constructor and `RunConfig`, but with different "
                f"values. In constructor: '{model_dir}', in `RunConfig`: '{config.model_dir}' "
            )
        return config.replace(model_dir=model_dir)
    if config.model_dir is None:
        model_dir = tempfile.mkdtemp(prefix="keras_tpu_estimator_")
        _log.warning("Using temporary folder as model directory: %s", model_dir)
        return config.replace(model_dir=model_dir)
    return config


def _load_global_step_from_checkpoint_dir(checkpoint_dir: str) -> Any:
    """The global step of the newest checkpoint in `checkpoint_dir`, or 0 when none can be read.

    What `tensorflow.python.estimator.estimator` offered under this name
    (tensorflow/tpu's EfficientNet and DeepLab call it): the step as the
    checkpoint holds it (a NumPy int64), else the int 0.

    Example:

    >>> _load_global_step_from_checkpoint_dir("/no/such/dir")
    0
    """
    try:
        return tf.train.load_checkpoint(tf.train.latest_checkpoint(checkpoint_dir)).get_tensor("global_step")
    except Exception:  # noqa: BLE001  (the original: any failure reads as step 0)
        return 0


def _steps_per_execution(config: RunConfig) -> int:
    """Steps per execution that land on every step-based save, summary and log, as a step-by-step loop did."""
    intervals = [
        whole_count(n)
        for n in (config.save_checkpoints_steps, config.save_summary_steps, config.log_step_count_steps)
        if n
    ]
    return min(math.gcd(*intervals), 1000) if intervals else 100


class Estimator(EstimatorCalls):
    """Drop-in `tf.estimator.Estimator` on Keras 3: same constructor, same methods.

    Args:
        model_fn: `model_fn(features, labels, mode, params, config)` returning an
            `EstimatorSpec`; only the arguments it declares are passed, and
            `params` is the constructor's, as given (no `batch_size` added).
        model_dir: Checkpoint and summary directory; else `config.model_dir`,
            else a temporary directory. If both are set they must match.
        config: `RunConfig` (None: the defaults). `train_distribute` /
            `eval_distribute` run training / evaluation on a strategy's replicas.
        params: Dict passed (deep-copied) to `model_fn` and `input_fn`.
        warm_start_from: A checkpoint path or `WarmStartSettings`.

    Example:

    ```python
    def my_model_fn(features, labels, mode, params):
        return model_fn(features, labels, mode, params).as_estimator_spec()

    def input_fn(params, input_context=None):      # input_context: under a strategy
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat()
        if input_context:
            dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return dataset.batch(params["batch_size"])

    estimator = Estimator(my_model_fn, config=RunConfig(model_dir=model_dir), params={"batch_size": 4})
    estimator.train(input_fn, steps=1)
    for prediction in estimator.predict(lambda: tf.data.Dataset.from_tensor_slices({"x": x}).batch(4)):
        assert set(prediction) == {"y", "probabilities", "class"}   # one row's
    ```

    Differences from the Estimator: `hooks` may also be Keras callbacks;
    summaries made by `tf.compat.v1.summary` inside the TRAIN `model_fn` are
    written at the Estimator's steps, the facade's `loss` at execution boundaries.
    """

    def __init__(
        self,
        model_fn: ModelFn,
        model_dir: str | os.PathLike | None = None,
        config: RunConfig | None = None,
        params: dict | None = None,
        warm_start_from: str | WarmStartSettings | None = None,
    ):
        _check_members_not_overridden(type(self))
        config = _config_with_model_dir(config, model_dir)
        _log.info("Using config: %s", config)
        if model_fn is None:
            raise ValueError("model_fn must be provided to Estimator.")
        verify_model_fn_args(model_fn, params)
        if params is None and "params" in function_args(model_fn, named_only=True):
            _log.warning(
                "Estimator's model_fn (%s) includes params argument, but params are not passed to Estimator.",
                model_fn,
            )
        self._model_fn = model_fn
        self._params = copy.deepcopy(params or {})
        self._config = config
        self._log_every_n_steps = config.log_step_count_steps
        self._warm_start = as_warm_start_settings(warm_start_from)

    # ---------------------------------------------------------------- properties
    @property
    def model_dir(self) -> str:
        """Where checkpoints and summaries live."""
        return self._config.model_dir

    @property
    def config(self) -> RunConfig:
        """The `RunConfig`, with `model_dir` filled in."""
        return self._config

    @property
    def params(self) -> dict:
        """A copy of `params`."""
        return copy.deepcopy(self._params)

    @property
    def model_fn(self) -> ModelFn:
        """`model_fn(features, labels, mode, config)` bound to `params`, returning the checked spec.

        Call it inside a graph (`with tf.Graph().as_default():`), as the original's.
        """

        def public_model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
            return self._call_model_fn(features, labels, mode, config)

        return public_model_fn

    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in `model_dir` (found by scanning, so a lost state file loses nothing), or None."""
        found = checkpoints_newest_first(self.model_dir)
        return found[0] if found else None

    def eval_dir(self, name: str | None = None) -> str:
        """Where `evaluate(name=...)` writes its summaries: `model_dir/eval` or `model_dir/eval_<name>`."""
        return os.path.join(self.model_dir, f"eval_{name}" if name else "eval")

    def get_variable_names(self) -> list[str]:
        """Names of the variables in the latest checkpoint."""
        return [name for name, _ in tf.train.list_variables(self._require_checkpoint())]

    def get_variable_value(self, name: str) -> np.ndarray:
        """The value of variable `name` in the latest checkpoint."""
        return tf.train.load_variable(self._require_checkpoint(), name)

    # ---------------------------------------------------- what subclasses change
    def _library_model_fn(self) -> ModelFn:
        """The `model_fn` the engine calls: the user's, called as the Estimator called it."""
        return plain_model_fn(self._model_fn, self._params)

    def _library_input_fn(self, input_fn: InputFn) -> InputFn:
        """The `input_fn` the engine calls: the user's, called as the Estimator called it."""
        return plain_input_fn(input_fn, self._params, self._config)

    def _library_params(self) -> dict:
        return {}

    def _model(self, mode: str) -> EstimatorModel:
        """A fresh model for one call in `mode`: the CPU path, on the mode's strategy."""
        return EstimatorModel(
            self._library_model_fn(),
            params=self._library_params(),
            config=self._config,
            use_tpu=False,
            strategy=mode_strategy(self._config, mode),
            steps_per_execution=_steps_per_execution(self._config),
        )

    def _export_options(self) -> dict:
        return {"export_to_cpu": True, "export_to_tpu": False, "api_version": 1}

    # ------------------------------------------------------------------ modes
    @eager_call
    def train(
        self,
        input_fn: InputFn,
        hooks: Sequence[Any] | None = None,
        steps: int | None = None,
        max_steps: int | None = None,
        saving_listeners: Sequence[Any] | None = None,
    ) -> Estimator:
        """Trains from the latest checkpoint in `model_dir` for `steps` or up to `max_steps`.

        Returns:
            `self`, as the Estimator did.

        Example:

        ```python
        estimator.train(input_fn, max_steps=2)
        ```
        """
        return self._train(input_fn, hooks, steps, max_steps, saving_listeners)

    @eager_call
    def evaluate(
        self,
        input_fn: InputFn,
        steps: int | None = None,
        hooks: Sequence[Any] | None = None,
        checkpoint_path: str | None = None,
        name: str | None = None,
    ) -> dict:
        """Evaluates the latest (or given) checkpoint for `steps` steps (None: to the end of input).

        Without a checkpoint it evaluates freshly initialised (or warm-started)
        variables, with the original's log line.

        Returns:
            Every `eval_metric_ops` value, `loss` (the mean of the steps'
            losses) and `global_step` (the checkpoint's step); each value is
            also written to `model_dir/eval[_name]` for TensorBoard.

        Example:

        ```python
        estimator.evaluate(eval_input_fn, steps=1)  # {"accuracy": ..., "loss": ..., "global_step": ...}
        ```
        """
        return self._evaluate(input_fn, steps, hooks, checkpoint_path, name)

    @eager_generator
    def predict(
        self,
        input_fn: InputFn,
        predict_keys: Sequence[str] | str | None = None,
        hooks: Sequence[Any] | None = None,
        checkpoint_path: str | None = None,
        yield_single_examples: bool = True,
    ) -> Iterator[Any]:
        """Yields predictions of the latest (or given) checkpoint.

        Yields:
            One dict per example (`yield_single_examples=True`), or one dict
            of arrays per input batch, as `model_fn` returned it.

        Example:

        ```python
        for prediction in estimator.predict(predict_input_fn):
            print(prediction["class"])
        ```
        """
        yield from self._predict(input_fn, predict_keys, hooks, checkpoint_path, yield_single_examples)

    @eager_call
    def export_saved_model(
        self,
        export_dir_base: str | bytes | os.PathLike,
        serving_input_receiver_fn: Any,
        assets_extra: dict | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        experimental_mode: str = ModeKeys.PREDICT,
    ) -> bytes:
        """Exports the latest (or given) checkpoint as a SavedModel under `export_dir_base/<time>`.

        Writes one `serve` MetaGraph (a `TPUEstimator` also writes `serve, tpu`);
        `experimental_mode` TRAIN or EVAL exports a `train` / `eval` MetaGraph
        from a `SupervisedInputReceiver`.

        Returns:
            The export directory as `bytes`, as the original returned it.

        Example:

        ```python
        estimator.train(input_fn, max_steps=1)
        path = estimator.export_saved_model(os.path.join(model_dir, "export"), serving_input_receiver_fn)
        ```
        """
        if not serving_input_receiver_fn:
            raise ValueError("An input_receiver_fn must be defined.")
        self._check_export()
        checkpoint = self._checkpoint(checkpoint_path)
        if checkpoint is None and self._warm_start is not None:
            checkpoint = resolve_checkpoint_path(self._warm_start.ckpt_to_initialize_from)
        if checkpoint is None:
            raise ValueError(
                f"Couldn't find trained model at {self.model_dir}. Call train() first, or pass "
                "checkpoint_path."
            )
        path = export_saved_model(
            export_dir_base,
            serving_input_receiver_fn,
            self._library_model_fn(),
            checkpoint,
            params=self._library_params(),
            config=self._config,
            assets_extra=assets_extra,
            as_text=as_text,
            mode=experimental_mode,
            **self._export_options(),
        )
        return os.fsencode(path)  # the original returned bytes, whatever the base

    def export_savedmodel(
        self,
        export_dir_base: str | bytes | os.PathLike,
        serving_input_receiver_fn: Any,
        assets_extra: dict | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        strip_default_attrs: bool = False,
    ) -> bytes:
        """The deprecated name of `export_saved_model` (PREDICT only; `strip_default_attrs` is ignored).

        Example:

        ```python
        estimator.train(input_fn, max_steps=1)
        path = estimator.export_savedmodel(os.path.join(model_dir, "export"), serving_input_receiver_fn)
        ```
        """
        _log.warning("export_savedmodel is deprecated: this function has been renamed, use export_saved_model.")
        del strip_default_attrs  # TF2 SavedModels are written without them
        return self.export_saved_model(
            export_dir_base, serving_input_receiver_fn, assets_extra, as_text, checkpoint_path
        )


__all__ = ["Estimator", "_load_global_step_from_checkpoint_dir"]
