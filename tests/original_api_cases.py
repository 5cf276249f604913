"""The original TPUEstimator's public API checks, as cases that run unchanged on both libraries.

Two tables of `name -> case`; a case is a function of an `api` namespace:

- `api.estimator`: the `tf.compat.v1.estimator` module on the original (TF 2.15 +
  tensorflow-estimator 2.15, see `original_api()`), `keras_tpu_estimator.estimator` here;
- `api.parse_iterations_per_loop`: the original's `tpu.util.parse_iterations_per_loop`,
  `keras_tpu_estimator.parse_iterations_per_loop` here;
- `api.build_raw_supervised_input_receiver_fn`: the original's
  `tf.compat.v1.estimator.experimental.build_raw_supervised_input_receiver_fn`,
  `keras_tpu_estimator.export.build_raw_supervised_input_receiver_fn` here;
- `api.model_dir`: an empty temporary directory of the case's own.

`ERRORS`: each case makes one call that the original rejects (or, where the name
says so, accepts: the original did not check). `scripts/original_api.py` records
the exception's class and `str()` (through `normalise`), or None when nothing
was raised, in `tests/original_api.py`. `DEFAULTS`: each case returns a
JSON-able value (defaults that migrated code reads), recorded as is.

`use_tpu=True` cases run the original's one-core context: `TPUConfig(num_shards=1)`
gives TPU system metadata of one core without asking for a TPU, so the original
checks and builds its TPU graph on a CPU machine (running that graph needs a
TPU; no case gets that far). This library runs them under the default strategy.

The code imports neither `keras_tpu_estimator` nor `tensorflow_estimator` at module
level. Every case is small: a one-weight linear model, batches of 2, at most 4 steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

Case = Callable[[Any], Any]

ERRORS: dict[str, Case] = {}
DEFAULTS: dict[str, Case] = {}

MODEL_DIR = "{model_dir}"  # what `normalise` writes for the case's model_dir


def normalise(text: str, model_dir: str) -> str:
    """`text` without what changes between runs and libraries.

    The case's model_dir becomes `{model_dir}`, memory addresses `0x...`, graph
    tensors `<Tensor>` (`Tensor("name:0", shape=(2,), dtype=float32)` and
    `<tf.Tensor 'name:0' shape=(2,) dtype=float32>`: names and devices differ
    between TensorFlow versions), module paths in class reprs are dropped:
    `<class 'a.b.EstimatorSpec'>` becomes `<class '...EstimatorSpec'>`,
    `<a.b.RunConfig object at 0x...>` becomes `<...RunConfig object at 0x...>`,
    and so are the stack frames (`File "...", line N, in f` lines) a graph
    error's message lists for the node that failed.
    """
    text = re.sub(r'^[ \t]*File "[^"\n]*", line \d+, in [^\n]*(?:\n|$)', "", text, flags=re.MULTILINE)
    text = text.replace(model_dir, MODEL_DIR)
    text = re.sub(r"0x[0-9a-fA-F]+", "0x...", text)
    text = re.sub(r'Tensor\("[^"]*", shape=\([^)]*\), dtype=\w+(?:, device=[^)]*)?\)', "<Tensor>", text)
    text = re.sub(r"<tf\.Tensor '[^']*' shape=\([^)]*\) dtype=\w+>", "<Tensor>", text)
    text = re.sub(r"<class '(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)'>", r"<class '...\1'>", text)
    return re.sub(r"<(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*) object at", r"<...\1 object at", text)


# The original fails in these cases without a check of its own (an accident of its code):
# this library must raise the same type (TYPE_ONLY), or raise anything (ANY_ERROR).
TYPE_ONLY = {
    "constructor.model_fn=None",  # TypeError('unsupported callable') from TF's fn_args
    "constructor.model_fn=1",
    "evaluate.cpu.name=1",  # 'eval_' + name
    "train.use_tpu.input_fn with a dynamic batch dimension",  # the infeed's own shape check
}
ANY_ERROR = {
    "train.cpu.model_fn returns a Tensor",  # AttributeError: the Tensor has no `_replace`
}


def original_api(model_dir: str) -> types.SimpleNamespace:
    """The original's `api` namespace (TF 2.15 + tensorflow-estimator only)."""
    from tensorflow_estimator.python.estimator.tpu import util

    return types.SimpleNamespace(
        estimator=tf.compat.v1.estimator,
        parse_iterations_per_loop=util.parse_iterations_per_loop,
        build_raw_supervised_input_receiver_fn=(
            tf.compat.v1.estimator.experimental.build_raw_supervised_input_receiver_fn
        ),
        model_dir=model_dir,
    )


def _error(name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        assert name not in ERRORS, name
        ERRORS[name] = case
        return case

    return register


def _default(name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        assert name not in DEFAULTS, name
        DEFAULTS[name] = case
        return case

    return register


# --- a tiny program -------------------------------------------------------------------------------


class Stop(Exception):
    """Raised by a model_fn that has recorded what it saw: nothing needs to run after that."""


def model_fn_for(api: Any, make_spec: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """`y = x @ w` (w: [1, 1] zeros), mean squared error, SGD(0.1).

    Returns `TPUEstimatorSpec(mode, predictions={"y": y})` in PREDICT, else
    `TPUEstimatorSpec(mode, loss=loss, train_op=train_op)`; with `make_spec`, what
    `make_spec(mode=..., loss=..., train_op=..., predictions=..., features=...,
    labels=..., params=...)` returns (loss and train_op are None without labels).
    """
    est = api.estimator

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(features["x"], w)
        loss = train_op = None
        if labels is not None:
            loss = tf.reduce_mean(tf.square(y - labels))
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=tf.compat.v1.train.get_global_step()
            )
        parts = {"mode": mode, "loss": loss, "train_op": train_op, "predictions": {"y": y}}
        if make_spec is not None:
            return make_spec(**parts, features=features, labels=labels, params=params)
        if mode == est.ModeKeys.PREDICT:
            return est.tpu.TPUEstimatorSpec(mode, predictions=parts["predictions"])
        return est.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn


def input_fn(params):
    """4 batches of `params["batch_size"]` rows: features {"x": ones}, labels ones (both [b, 1])."""
    ones = np.ones((8, 1), np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": ones}, ones))
    return dataset.batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params):
    """2 batches of `params["batch_size"]` rows of features {"x": ones} (no labels)."""
    dataset = tf.data.Dataset.from_tensor_slices({"x": np.ones((4, 1), np.float32)})
    return dataset.batch(params["batch_size"], drop_remainder=True)


def serving_input_receiver_fn_for(api: Any) -> Callable[[], Any]:
    def serving_input_receiver_fn():
        x = tf.compat.v1.placeholder(tf.float32, [None, 1], name="x")
        return api.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

    return serving_input_receiver_fn


def tpu_config(api: Any, use_tpu: bool = False, **fields: Any) -> Any:
    """`TPUConfig(iterations_per_loop=1)`; `num_shards=1` (the one-core context) with use_tpu."""
    defaults = {"iterations_per_loop": 1, "num_shards": 1 if use_tpu else None}
    return api.estimator.tpu.TPUConfig(**{**defaults, **fields})


def run_config(api: Any, use_tpu: bool = False, **fields: Any) -> Any:
    return api.estimator.tpu.RunConfig(model_dir=api.model_dir, tpu_config=tpu_config(api, use_tpu, **fields))


def estimator_for(
    api: Any, model_fn: Callable[..., Any] | None = None, *, use_tpu: bool = False, **kwargs: Any
) -> Any:
    """`TPUEstimator` over `model_fn_for(api)` writing to `api.model_dir`; batch sizes 2."""
    kwargs = {"train_batch_size": 2, "eval_batch_size": 2, "predict_batch_size": 2, **kwargs}
    if "config" not in kwargs:
        kwargs["config"] = run_config(api, use_tpu)
    return api.estimator.tpu.TPUEstimator(model_fn or model_fn_for(api), use_tpu=use_tpu, **kwargs)


def write_checkpoint(api: Any) -> str:
    """A TF1 checkpoint `model.ckpt-1` of the program (`w` = 0.5, `global_step` = 1) in model_dir."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5]]))
        step = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver([w, step])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step.assign(1))
            return saver.save(session, os.path.join(api.model_dir, "model.ckpt"), global_step=1)


def two_checkpoints_newest_truncated(api: Any, estimator: Any) -> str:
    """Trains `estimator` to step 1, then to step 2; the newest checkpoint's data file is then cut in half.

    Returns the truncated file's path. Each `train` call ends with a checkpoint
    of its last step, so `model.ckpt-1` stays whole and `model.ckpt-2` is the
    newest (the one `tf.train.latest_checkpoint` names).
    """
    estimator.train(input_fn, max_steps=1)
    estimator.train(input_fn, max_steps=2)
    newest = tf.train.latest_checkpoint(api.model_dir)
    assert newest is not None and newest.endswith("model.ckpt-2"), newest
    data = newest + ".data-00000-of-00001"
    with open(data, "r+b") as file:
        file.truncate(os.path.getsize(data) // 2)
    return data


@contextlib.contextmanager
def tf_config(value: dict | None) -> Iterator[None]:
    """`TF_CONFIG` set to `value` (removed for None), restored afterwards."""
    saved = os.environ.pop("TF_CONFIG", None)
    if value is not None:
        os.environ["TF_CONFIG"] = json.dumps(value)
    try:
        yield
    finally:
        os.environ.pop("TF_CONFIG", None)
        if saved is not None:
            os.environ["TF_CONFIG"] = saved


def _label(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


# --- TPUEstimator(...) ----------------------------------------------------------------------------


@_error("constructor.config=None")
def _(api):
    api.estimator.tpu.TPUEstimator(model_fn_for(api), config=None, use_tpu=False)


@_error("constructor.config='config'")
def _(api):
    api.estimator.tpu.TPUEstimator(model_fn_for(api), config="config", use_tpu=False)


@_error("constructor.config=estimator.RunConfig()")
def _(api):
    config = api.estimator.RunConfig(model_dir=api.model_dir)
    api.estimator.tpu.TPUEstimator(model_fn_for(api), config=config, use_tpu=False)


@_error("constructor.params={'batch_size': 8}")
def _(api):
    estimator_for(api, params={"batch_size": 8})


@_error("constructor.params={'context': None}")
def _(api):
    estimator_for(api, params={"context": None})


@_error("constructor.params={'use_tpu': True} (not reserved)")
def _(api):
    estimator_for(api, params={"use_tpu": True})


def _batch_size_case(use_tpu: bool, name: str, value: Any) -> Case:
    def case(api):
        estimator_for(api, use_tpu=use_tpu, **{name: value})

    return case


for _value in (None, 0, -1, 2.5, 1.0, "2", True, np.int64(2)):
    _key = "np.int64(2)" if isinstance(_value, np.integer) else _label(_value)
    _error(f"constructor.use_tpu.train_batch_size={_key}")(
        _batch_size_case(True, "train_batch_size", _value)
    )
for _name in ("eval_batch_size", "predict_batch_size"):
    for _value in (0, -1, 2.5, "2"):
        _error(f"constructor.use_tpu.{_name}={_label(_value)}")(_batch_size_case(True, _name, _value))
    _error(f"constructor.use_tpu.{_name}=None")(_batch_size_case(True, _name, None))
for _name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
    for _value in (None, 0, -1, 2.5):
        _error(f"constructor.cpu.{_name}={_label(_value)} (not checked)")(
            _batch_size_case(False, _name, _value)
        )


def _api_version_case(value: Any) -> Case:
    def case(api):
        estimator_for(api, export_saved_model_api_version=value)

    return case


for _value in (3, 0, "2", 2.0, True, None):
    _error(f"constructor.export_saved_model_api_version={_label(_value)}")(_api_version_case(_value))


@_error("constructor.export_to_cpu=False,export_to_tpu=False (checked at export)")
def _(api):
    estimator_for(api, export_to_cpu=False, export_to_tpu=False)


@_error("constructor.model_fn=None")
def _(api):
    api.estimator.tpu.TPUEstimator(None, config=run_config(api), use_tpu=False)


@_error("constructor.model_fn=1")
def _(api):
    api.estimator.tpu.TPUEstimator(1, config=run_config(api), use_tpu=False)


@_error("constructor.model_fn(features,labels,mode,params,foo)")
def _(api):
    def model_fn(features, labels, mode, params, foo):
        del features, labels, mode, params, foo

    estimator_for(api, model_fn)


@_error("constructor.model_fn(x,labels,mode,params)")
def _(api):
    def model_fn(x, labels, mode, params):
        del x, labels, mode, params

    estimator_for(api, model_fn)


@_error("constructor.model_fn(features,labels,mode) (params checked at train)")
def _(api):
    def model_fn(features, labels, mode):
        del features, labels, mode

    estimator_for(api, model_fn)


@_error("constructor.model_fn(features,labels,mode),params={'a': 1}")
def _(api):
    def model_fn(features, labels, mode):
        del features, labels, mode

    estimator_for(api, model_fn, params={"a": 1})


@_error("constructor.model_fn(features,labels,mode,params,config)")
def _(api):
    def model_fn(features, labels, mode, params, config):
        del features, labels, mode, params, config

    estimator_for(api, model_fn)


@_error("constructor.model_dir!=config.model_dir")
def _(api):
    estimator_for(api, model_dir=os.path.join(api.model_dir, "other"))


@_error("constructor.model_dir==config.model_dir")
def _(api):
    estimator_for(api, model_dir=api.model_dir)


@_error("constructor.warm_start_from=1")
def _(api):
    estimator_for(api, warm_start_from=1)


@_error("constructor.use_tpu.per_host_input_for_training=False,num_cores_per_replica=2")
def _(api):
    config = api.estimator.tpu.RunConfig(
        model_dir=api.model_dir,
        tpu_config=api.estimator.tpu.TPUConfig(
            per_host_input_for_training=False, num_cores_per_replica=2
        ),
    )
    estimator_for(api, use_tpu=True, config=config)


def _embedding_spec(partition_strategy: str) -> Any:
    """Stands in for `EmbeddingConfigSpec`: the constructor reads these two attributes."""
    return types.SimpleNamespace(partition_strategy=partition_strategy, feature_columns=None)


@_error("constructor.cpu.embedding_config_spec(partition_strategy='mod')")
def _(api):
    estimator_for(api, embedding_config_spec=_embedding_spec("mod"))


@_error("constructor.use_tpu.embedding_config_spec,per_host_input_for_training=False")
def _(api):
    config = api.estimator.tpu.RunConfig(
        model_dir=api.model_dir,
        tpu_config=api.estimator.tpu.TPUConfig(per_host_input_for_training=False, num_shards=1),
    )
    estimator_for(api, use_tpu=True, config=config, embedding_config_spec=_embedding_spec("div"))


# --- RunConfig and tpu.RunConfig ------------------------------------------------------------------


def _run_config_case(module: str, **kwargs: Any) -> Case:
    def case(api):
        with tf_config(None):
            owner = api.estimator.tpu if module == "tpu" else api.estimator
            owner.RunConfig(**kwargs)

    return case


_RUN_CONFIG_ERRORS: dict[str, dict] = {
    "save_checkpoints_steps=10,save_checkpoints_secs=10": {
        "save_checkpoints_steps": 10,
        "save_checkpoints_secs": 10,
    },
    "save_checkpoints_steps=None,save_checkpoints_secs=None": {
        "save_checkpoints_steps": None,
        "save_checkpoints_secs": None,
    },
    "save_checkpoints_steps=-1": {"save_checkpoints_steps": -1},
    "save_checkpoints_steps=0": {"save_checkpoints_steps": 0},
    "save_checkpoints_secs=-1": {"save_checkpoints_secs": -1},
    "save_summary_steps=-1": {"save_summary_steps": -1},
    "save_summary_steps=0": {"save_summary_steps": 0},
    "keep_checkpoint_max=-1": {"keep_checkpoint_max": -1},
    "keep_checkpoint_max=0": {"keep_checkpoint_max": 0},
    "keep_checkpoint_every_n_hours=0": {"keep_checkpoint_every_n_hours": 0},
    "log_step_count_steps=0": {"log_step_count_steps": 0},
    "log_step_count_steps=None": {"log_step_count_steps": None},
    "tf_random_seed=1.5": {"tf_random_seed": 1.5},
    "session_config=1": {"session_config": 1},
    "model_dir=''": {"model_dir": ""},
    "protocol='http'": {"protocol": "http"},
    "device_fn=lambda: None": {"device_fn": lambda: None},
    "session_creation_timeout_secs=0": {"session_creation_timeout_secs": 0},
    "experimental_max_worker_delay_secs=1.5": {"experimental_max_worker_delay_secs": 1.5},
}
for _module in ("estimator", "tpu"):
    for _key, _kwargs in _RUN_CONFIG_ERRORS.items():
        _error(f"{_module}.RunConfig.{_key}")(_run_config_case(_module, **_kwargs))


@_error("tpu.RunConfig.tpu_config=1 (not checked)")
def _(api):
    with tf_config(None):
        api.estimator.tpu.RunConfig(tpu_config=1)


@_error("tpu.RunConfig.master='',cluster=resolver")
def _(api):
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    with tf_config(None):
        api.estimator.tpu.RunConfig(master="", cluster=resolver)


@_error("tpu.RunConfig.replace(foo=1)")
def _(api):
    with tf_config(None):
        api.estimator.tpu.RunConfig().replace(foo=1)


@_error("tpu.RunConfig.replace(master='x')")
def _(api):
    with tf_config(None):
        api.estimator.tpu.RunConfig().replace(master="x")


@_error("tpu.RunConfig.replace(save_checkpoints_steps=5,save_checkpoints_secs=5)")
def _(api):
    with tf_config(None):
        api.estimator.tpu.RunConfig().replace(save_checkpoints_steps=5, save_checkpoints_secs=5)


@_error("tpu.RunConfig.TF_CONFIG{task: ps, no cluster}")
def _(api):
    with tf_config({"task": {"type": "ps", "index": 0}}):
        api.estimator.tpu.RunConfig()


@_error("tpu.RunConfig.TF_CONFIG{cluster, no task}")
def _(api):
    with tf_config({"cluster": {"worker": ["host0:2222", "host1:2222"]}}):
        api.estimator.tpu.RunConfig()


@_error("tpu.RunConfig.TF_CONFIG{model_dir}!=model_dir")
def _(api):
    with tf_config({"model_dir": os.path.join(api.model_dir, "tf_config")}):
        api.estimator.tpu.RunConfig(model_dir=api.model_dir)


# --- TPUConfig ------------------------------------------------------------------------------------


def _tpu_config_case(**kwargs: Any) -> Case:
    def case(api):
        with tf_config(None):
            api.estimator.tpu.TPUConfig(**kwargs)

    return case


_TPU_CONFIG_CASES: list[tuple[str, Any]] = [
    ("iterations_per_loop", value) for value in (0, -1, "012", "0s", "abc", 2.5, "30s", "1h", None)
]
_TPU_CONFIG_CASES += [("num_shards", value) for value in (0, -1, 2.0, 8)]
_TPU_CONFIG_CASES += [("num_cores_per_replica", value) for value in (0, 3, 1, 2, 256)]
_TPU_CONFIG_CASES += [("per_host_input_for_training", value) for value in (False, 3, 4, 5, 7, "x")]
_TPU_CONFIG_CASES += [("eval_training_input_configuration", value) for value in (1, 3, 5)]
_TPU_CONFIG_CASES += [("initial_infeed_sleep_secs", value) for value in (-1, 1.5, 0)]
_TPU_CONFIG_CASES += [("experimental_host_call_every_n_steps", value) for value in (0, -1)]
for _name, _value in _TPU_CONFIG_CASES:
    _error(f"TPUConfig.{_name}={_label(_value)}")(_tpu_config_case(**{_name: _value}))
for _key, _kwargs in {
    "input_partition_dims=[None]*3": {"input_partition_dims": [None, None, None]},
    "input_partition_dims=[[1, 2]],PER_HOST_V1": {"input_partition_dims": [[1, 2]]},
    "input_partition_dims=[[1, 2]],PER_HOST_V2,num_cores_per_replica=None": {
        "input_partition_dims": [[1, 2]],
        "per_host_input_for_training": 3,
    },
}.items():
    _error(f"TPUConfig.{_key}")(_tpu_config_case(**_kwargs))


# --- parse_iterations_per_loop --------------------------------------------------------------------

PARSE_VALID = ("2", 5, "1h", "30s", "10m", "5|", "5\n")
PARSE_INVALID = ("012", "0", "0s", "abc", -1, 0, 2.5, "1d", " 5", "5 ", "5s ", "", None, True, "-1")


def _parse_error_case(value: Any) -> Case:
    def case(api):
        api.parse_iterations_per_loop(value)

    return case


def _parse_value_case(value: Any) -> Case:
    def case(api):
        result = api.parse_iterations_per_loop(value)
        return {"value": result.value, "unit": result.unit, "tuple": list(result)}

    return case


for _value in PARSE_INVALID:
    _error(f"parse_iterations_per_loop({_value!r})")(_parse_error_case(_value))
for _value in PARSE_VALID:
    _default(f"parse_iterations_per_loop({_value!r})")(_parse_value_case(_value))


# --- train ----------------------------------------------------------------------------------------


def _train_case(use_tpu: bool, **kwargs: Any) -> Case:
    def case(api):
        estimator_for(api, use_tpu=use_tpu).train(input_fn, **kwargs)

    return case


for _where, _use_tpu in (("cpu", False), ("use_tpu", True)):
    for _key, _kwargs in {
        "steps=12.3": {"steps": 12.3},
        "steps=-321": {"steps": -321},
        "steps=0": {"steps": 0},
        "max_steps=0": {"max_steps": 0},
        "max_steps=-1": {"max_steps": -1},
        "max_steps=2.5": {"max_steps": 2.5},
        "steps=1,max_steps=1": {"steps": 1, "max_steps": 1},
        "hooks=[object()]": {"max_steps": 1, "hooks": [object()]},
        "hooks=[1]": {"max_steps": 1, "hooks": [1]},
        "saving_listeners=[object()]": {"max_steps": 1, "saving_listeners": [object()]},
    }.items():
        _error(f"train.{_where}.{_key}")(_train_case(_use_tpu, **_kwargs))
_error("train.use_tpu.steps=None,max_steps=None")(_train_case(True))
_error("train.cpu.steps=None,max_steps=None (finite input)")(_train_case(False))


@_error("train.cpu.max_steps reached (skips)")
def _(api):
    write_checkpoint(api)
    estimator_for(api).train(input_fn, max_steps=1)


@_error("train.cpu.truncated newest checkpoint")
def _(api):
    estimator = estimator_for(api)
    two_checkpoints_newest_truncated(api, estimator)
    estimator.train(input_fn, max_steps=3)


@_error("train.cpu.input_fn()")
def _(api):
    def no_params_input_fn():
        return input_fn({"batch_size": 2})

    estimator_for(api).train(no_params_input_fn, max_steps=1)


@_error("train.cpu.input_fn(params,mode,config)")
def _(api):
    def full_input_fn(params, mode, config):
        del mode, config
        return input_fn(params)

    estimator_for(api).train(full_input_fn, max_steps=1)


@_error("train.cpu.model_fn(features,mode,params) with labels")
def _(api):
    def model_fn(features, mode, params):
        del features, mode, params
        raise Stop

    estimator_for(api, model_fn).train(input_fn, max_steps=1)


@_error("train.cpu.model_fn(features,labels,mode)")
def _(api):
    def model_fn(features, labels, mode):
        del features, labels, mode
        raise Stop

    estimator_for(api, model_fn).train(input_fn, max_steps=1)


@_error("train.cpu.model_fn returns a Tensor")
def _(api):
    def model_fn(features, labels, mode, params):
        del labels, mode, params
        return tf.reduce_sum(features["x"])

    estimator_for(api, model_fn).train(input_fn, max_steps=1)


@_error("train.cpu.TPUEstimatorSpec without train_op")
def _(api):
    def make_spec(mode, loss, **_):
        return api.estimator.tpu.TPUEstimatorSpec(mode, loss=loss)

    estimator_for(api, model_fn_for(api, make_spec)).train(input_fn, max_steps=1)


@_error("train.cpu.TPUEstimatorSpec without loss")
def _(api):
    def make_spec(mode, train_op, **_):
        return api.estimator.tpu.TPUEstimatorSpec(mode, train_op=train_op)

    estimator_for(api, model_fn_for(api, make_spec)).train(input_fn, max_steps=1)


@_error("train.cpu.TPUEstimatorSpec(mode=None)")
def _(api):
    def make_spec(loss, train_op, **_):
        return api.estimator.tpu.TPUEstimatorSpec(None, loss=loss, train_op=train_op)

    estimator_for(api, model_fn_for(api, make_spec)).train(input_fn, max_steps=1)


@_error("train.cpu.EstimatorSpec")
def _(api):
    def make_spec(mode, loss, train_op, **_):
        return api.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    estimator_for(api, model_fn_for(api, make_spec)).train(input_fn, max_steps=1)


@_error("train.cpu.eval_training_input_configuration=SLICED (not checked in TRAIN)")
def _(api):
    config = run_config(api, eval_training_input_configuration=5)
    estimator_for(api, config=config).train(input_fn, max_steps=1)


@_error("evaluate.cpu.eval_training_input_configuration=SLICED")
def _(api):
    config = run_config(api, eval_training_input_configuration=5)
    estimator_for(api, config=config).evaluate(input_fn, steps=1)


@_error("predict.cpu.eval_training_input_configuration=SLICED")
def _(api):
    config = run_config(api, eval_training_input_configuration=5)
    list(estimator_for(api, config=config).predict(predict_input_fn))


@_error("train.cpu.input_fn returns a 3-tuple")
def _(api):
    def three_input_fn(params):
        ones = tf.ones([params["batch_size"], 1])
        return {"x": ones}, ones, ones

    estimator_for(api).train(three_input_fn, max_steps=1)


# --- train on the TPU path (graph building only) --------------------------------------------------


def _tpu_train_case(make_spec: Callable[..., Any] | None = None, fn: Any = None, **kwargs) -> Case:
    def case(api):
        model_fn = model_fn_for(api, make_spec and (lambda **parts: make_spec(api, **parts)))
        estimator_for(api, model_fn, use_tpu=True, **kwargs).train(fn or input_fn, max_steps=1)

    return case


def _context_in_model_fn(attribute: str) -> Callable[..., Any]:
    def make_spec(api, params, **_):
        context = params["context"]
        value = getattr(context, attribute)
        if callable(value):
            value()
        raise Stop

    return make_spec


_error("train.use_tpu.model_fn calls context.current_input_fn_deployment()")(
    _tpu_train_case(_context_in_model_fn("current_input_fn_deployment"))
)
_error("train.use_tpu.model_fn reads context.current_host")(
    _tpu_train_case(_context_in_model_fn("current_host"))
)


def _context_input_fn(attribute: str) -> Callable[[dict], Any]:
    def context_input_fn(params):
        getattr(params["context"], attribute)
        raise Stop

    return context_input_fn


_error("train.use_tpu.input_fn reads context.device_assignment")(
    _tpu_train_case(fn=_context_input_fn("device_assignment"))
)


def _chief_hooks_spec(api, mode, loss, train_op, **_):
    hook = tf.compat.v1.train.StopAtStepHook(last_step=1)
    return api.estimator.EstimatorSpec(
        mode, loss=loss, train_op=train_op, training_chief_hooks=[hook]
    )


_error("train.use_tpu.EstimatorSpec with training_chief_hooks")(_tpu_train_case(_chief_hooks_spec))


def _scalar_host_call_spec(api, mode, loss, train_op, **_):
    def host_call(loss):
        del loss
        return []

    return api.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=train_op, host_call=(host_call, [loss])
    )


_error("train.use_tpu.host_call with a scalar tensor")(_tpu_train_case(_scalar_host_call_spec))


def _summary_host_call_spec(api, mode, loss, train_op, **_):
    def host_call(loss):
        tf.compat.v1.summary.scalar("loss", loss[0])
        return []

    return api.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=train_op, host_call=(host_call, [tf.reshape(loss, [1])])
    )


_error("train.use_tpu.host_call with tf.compat.v1.summary")(_tpu_train_case(_summary_host_call_spec))


def _scaffold_none_spec(api, mode, loss, train_op, **_):
    return api.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=train_op, scaffold_fn=lambda: None
    )


_error("train.use_tpu.scaffold_fn returns None")(_tpu_train_case(_scaffold_none_spec))


def _dynamic_input_fn(params):
    ones = np.ones((8, 1), np.float32)
    return tf.data.Dataset.from_tensor_slices(({"x": ones}, ones)).batch(params["batch_size"])


_error("train.use_tpu.input_fn with a dynamic batch dimension")(_tpu_train_case(fn=_dynamic_input_fn))


def _features_labels_input_fn(params):
    ones = tf.ones([params["batch_size"], 1])
    return {"x": ones}, ones


@_error("train.use_tpu.PER_HOST_V2 input_fn returns (features, labels)")
def _(api):
    config = run_config(api, True, per_host_input_for_training=3)
    estimator_for(api, use_tpu=True, config=config).train(_features_labels_input_fn, max_steps=1)


@_error("train.use_tpu.PER_SHARD_V1 input_fn returns a Dataset")
def _(api):
    config = run_config(api, True, per_host_input_for_training=False)
    estimator_for(api, use_tpu=True, config=config).train(input_fn, max_steps=1)


@_error("train.use_tpu.input_fn()")
def _(api):
    def no_params_input_fn():
        return input_fn({"batch_size": 2})

    estimator_for(api, use_tpu=True).train(no_params_input_fn, max_steps=1)


@_error("train.use_tpu.model_fn(features,labels,mode)")
def _(api):
    def model_fn(features, labels, mode):
        del features, labels, mode
        raise Stop

    estimator_for(api, model_fn, use_tpu=True).train(input_fn, max_steps=1)


# --- evaluate -------------------------------------------------------------------------------------


def _evaluate_case(use_tpu: bool, **kwargs: Any) -> Case:
    def case(api):
        estimator_for(api, use_tpu=use_tpu).evaluate(input_fn, **kwargs)

    return case


for _where, _use_tpu in (("cpu", False), ("use_tpu", True)):
    for _key, _kwargs in {
        "steps=0": {"steps": 0},
        "steps=-1": {"steps": -1},
        "steps=1.5": {"steps": 1.5},
        "hooks=[object()]": {"steps": 1, "hooks": [object()]},
    }.items():
        _error(f"evaluate.{_where}.{_key}")(_evaluate_case(_use_tpu, **_kwargs))
_error("evaluate.use_tpu.steps=None")(_evaluate_case(True))
_error("evaluate.cpu.steps=None (finite input)")(_evaluate_case(False))
_error("evaluate.cpu.name=1")(_evaluate_case(False, steps=1, name=1))
_error("evaluate.cpu.name='a b'")(_evaluate_case(False, steps=1, name="a b"))


@_error("evaluate.use_tpu.eval_batch_size=None")
def _(api):
    estimator_for(api, use_tpu=True, eval_batch_size=None).evaluate(input_fn, steps=1)


@_error("evaluate.use_tpu.EstimatorSpec")
def _(api):
    def make_spec(mode, loss, train_op, **_):
        return api.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    model_fn = model_fn_for(api, make_spec)
    estimator_for(api, model_fn, use_tpu=True).evaluate(input_fn, steps=1)


@_error("evaluate.cpu.eval_metrics dict not matching metric_fn")
def _(api):
    def metric_fn(labels, predictions):
        return {"mse": tf.compat.v1.metrics.mean_squared_error(labels, predictions)}

    def make_spec(mode, loss, predictions, labels, **_):
        tensors = {"labels": labels, "y": predictions["y"]}
        return api.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, tensors))

    estimator_for(api, model_fn_for(api, make_spec)).evaluate(input_fn, steps=1)


@_error("evaluate.cpu.eval_metrics returns a non-dict")
def _(api):
    def metric_fn(labels, y):
        return tf.compat.v1.metrics.mean_squared_error(labels, y)

    def make_spec(mode, loss, predictions, labels, **_):
        tensors = [labels, predictions["y"]]
        return api.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, tensors))

    estimator_for(api, model_fn_for(api, make_spec)).evaluate(input_fn, steps=1)


@_error("evaluate.cpu.model_fn(features,labels,mode)")
def _(api):
    def model_fn(features, labels, mode):
        del features, labels, mode
        raise Stop

    estimator_for(api, model_fn).evaluate(input_fn, steps=1)


@_error("evaluate.cpu.truncated newest checkpoint")
def _(api):
    estimator = estimator_for(api)
    two_checkpoints_newest_truncated(api, estimator)
    estimator.evaluate(input_fn, steps=1)


# --- predict --------------------------------------------------------------------------------------


def _predict_case(use_tpu: bool, make_spec: Callable[..., Any] | None = None, **kwargs) -> Case:
    def case(api):
        model_fn = model_fn_for(api, make_spec and (lambda **parts: make_spec(api, **parts)))
        estimator = estimator_for(api, model_fn, use_tpu=use_tpu)
        list(estimator.predict(predict_input_fn, **kwargs))

    return case


def _tensor_predictions_spec(api, mode, predictions, **_):
    return api.estimator.tpu.TPUEstimatorSpec(mode, predictions=predictions["y"])


def _two_lengths_spec(api, mode, predictions, **_):
    ragged = {"y": predictions["y"], "z": tf.zeros([3])}
    return api.estimator.tpu.TPUEstimatorSpec(mode, predictions=ragged)


def _scalar_spec(api, mode, predictions, **_):
    return api.estimator.tpu.TPUEstimatorSpec(mode, predictions={"s": tf.reduce_sum(predictions["y"])})


def _int_key_spec(api, mode, predictions, **_):
    return api.estimator.tpu.TPUEstimatorSpec(mode, predictions={1: predictions["y"]})


def _transposed_spec(api, mode, predictions, **_):
    return api.estimator.tpu.TPUEstimatorSpec(mode, predictions={"t": tf.transpose(predictions["y"])})


_error("predict.cpu.predict_keys=['nope']")(_predict_case(False, predict_keys=["nope"]))
_error("predict.cpu.predict_keys=['y']")(_predict_case(False, predict_keys=["y"]))
_error("predict.cpu.predict_keys with Tensor predictions")(
    _predict_case(False, _tensor_predictions_spec, predict_keys=["y"])
)
_error("predict.cpu.predictions of two batch lengths")(_predict_case(False, _two_lengths_spec))
_error("predict.cpu.predictions of two batch lengths,yield_single_examples=False")(
    _predict_case(False, _two_lengths_spec, yield_single_examples=False)
)
_error("predict.cpu.scalar prediction")(_predict_case(False, _scalar_spec))
_error("predict.cpu.scalar prediction,yield_single_examples=False")(
    _predict_case(False, _scalar_spec, yield_single_examples=False)
)
_error("predict.cpu.transposed prediction")(_predict_case(False, _transposed_spec))
_error("predict.cpu.predictions with an int key")(_predict_case(False, _int_key_spec))
_error("predict.cpu.hooks=[object()]")(_predict_case(False, hooks=[object()]))
_error("predict.use_tpu.hooks=[object()]")(_predict_case(True, hooks=[object()]))
_error("predict.use_tpu.Tensor predictions")(_predict_case(True, _tensor_predictions_spec))


def _estimator_spec_predictions(api, mode, predictions, **_):
    return api.estimator.EstimatorSpec(mode, predictions=predictions)


_error("predict.use_tpu.EstimatorSpec")(_predict_case(True, _estimator_spec_predictions))


def _dynamic_predictions_spec(api, mode, predictions, features, **_):
    dynamic = tf.boolean_mask(predictions["y"], features["x"][:, 0] > 0)
    return api.estimator.tpu.TPUEstimatorSpec(mode, predictions={"y": dynamic})


_error("predict.use_tpu.predictions with a dynamic batch dimension")(
    _predict_case(True, _dynamic_predictions_spec)
)


@_error("predict.use_tpu.predict_batch_size=None")
def _(api):
    estimator = estimator_for(api, use_tpu=True, predict_batch_size=None)
    list(estimator.predict(predict_input_fn))


@_error("predict.cpu.input_fn()")
def _(api):
    def no_params_input_fn():
        return predict_input_fn({"batch_size": 2})

    list(estimator_for(api).predict(no_params_input_fn))


@_error("predict.cpu.truncated newest checkpoint")
def _(api):
    estimator = estimator_for(api)
    two_checkpoints_newest_truncated(api, estimator)
    list(estimator.predict(predict_input_fn))


# --- export_saved_model ---------------------------------------------------------------------------


def _export(api: Any, estimator: Any, base: Any = None) -> Any:
    base = os.path.join(api.model_dir, "export") if base is None else base
    return estimator.export_saved_model(base, serving_input_receiver_fn_for(api))


@_error("export_saved_model.no checkpoint")
def _(api):
    _export(api, estimator_for(api))


@_error("export_saved_model.export_to_cpu=False,export_to_tpu=False")
def _(api):
    write_checkpoint(api)
    _export(api, estimator_for(api, export_to_cpu=False, export_to_tpu=False))


@_error("export_saved_model.serving_input_receiver_fn=None")
def _(api):
    write_checkpoint(api)
    estimator_for(api).export_saved_model(os.path.join(api.model_dir, "export"), None)


def _export_outputs_case(make_outputs: Callable[[Any, Any], Any]) -> Case:
    def case(api):
        def make_spec(mode, predictions, **_):
            outputs = make_outputs(api, predictions)
            return api.estimator.tpu.TPUEstimatorSpec(
                mode, predictions=predictions, export_outputs=outputs
            )

        write_checkpoint(api)
        _export(api, estimator_for(api, model_fn_for(api, make_spec), export_to_tpu=False))

    return case


_error("export_saved_model.export_outputs={'serving_default': 1}")(
    _export_outputs_case(lambda api, predictions: {"serving_default": 1})
)
_error("export_saved_model.export_outputs=PredictOutput")(
    _export_outputs_case(lambda api, predictions: api.estimator.export.PredictOutput(predictions))
)
_error("export_saved_model.export_outputs without serving_default")(
    _export_outputs_case(
        lambda api, predictions: {
            "a": api.estimator.export.PredictOutput(predictions),
            "b": api.estimator.export.PredictOutput(predictions),
        }
    )
)


def _supervised_export_case(mode: str, export_to_tpu: bool) -> Case:
    """`export_saved_model(experimental_mode=mode)` from a receiver of features and labels.

    The receiver fn comes from `build_raw_supervised_input_receiver_fn`; the
    `model_fn(features, mode, params)` takes no labels.
    """

    def case(api):
        def model_fn(features, mode, params):
            del features, mode, params
            raise Stop

        receiver_fn = api.build_raw_supervised_input_receiver_fn({"x": tf.ones([2, 1])}, tf.ones([2, 1]))
        write_checkpoint(api)
        estimator = estimator_for(api, model_fn, export_to_tpu=export_to_tpu)
        estimator.export_saved_model(
            os.path.join(api.model_dir, "export"), receiver_fn, experimental_mode=mode
        )

    return case


for _mode in ("train", "eval", "infer"):
    for _export_to_tpu in (False, True):
        _error(
            f"export_saved_model.mode={_mode}{'' if _export_to_tpu else ',export_to_tpu=False'}"
            ".model_fn(features,mode,params) with labels"
        )(_supervised_export_case(_mode, _export_to_tpu))


def _supervised_export_accepted(mode: str) -> Case:
    def case(api):
        receiver_fn = api.build_raw_supervised_input_receiver_fn({"x": tf.ones([2, 1])}, tf.ones([2, 1]))
        write_checkpoint(api)
        estimator_for(api).export_saved_model(
            os.path.join(api.model_dir, "export"), receiver_fn, experimental_mode=mode
        )

    return case


for _mode in ("eval", "infer"):  # PREDICT too: model_fn gets the receiver's labels
    _error(f"export_saved_model.mode={_mode}.model_fn(features,labels,mode,params) (accepted)")(
        _supervised_export_accepted(_mode)
    )


@_default("export_saved_model.infer: the labels each model_fn call sees (export_to_tpu=True)")
def _(api):
    seen = []

    def model_fn(features, labels, mode, params):
        del params
        seen.append({"mode": mode, "labels": None if labels is None else labels.shape.as_list()})
        w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.zeros_initializer())
        return api.estimator.tpu.TPUEstimatorSpec(mode, predictions={"y": tf.matmul(features["x"], w)})

    receiver_fn = api.build_raw_supervised_input_receiver_fn({"x": tf.ones([2, 1])}, tf.ones([2, 1]))
    write_checkpoint(api)
    estimator_for(api, model_fn).export_saved_model(os.path.join(api.model_dir, "export"), receiver_fn)
    return seen


def _without_tensors_case(field: str) -> Case:
    """`evaluate` of a spec whose `host_call` / `eval_metrics` pair has no tensors: what it returns and ran."""

    def case(api):
        calls = []

        def host_fn():
            return tf.numpy_function(lambda: calls.append(1) or np.int64(0), [], tf.int64)

        def metric_fn():
            return {"constant": tf.compat.v1.metrics.mean(tf.constant(2.0))}

        def make_spec(**parts):
            pair = (host_fn, []) if field == "host_call" else (metric_fn, [])
            keep = ("mode", "loss", "train_op", "predictions")
            return api.estimator.tpu.TPUEstimatorSpec(**{k: parts[k] for k in keep}, **{field: pair})

        write_checkpoint(api)
        result = estimator_for(api, model_fn_for(api, make_spec)).evaluate(input_fn, steps=3)
        return {"results": {k: float(v) for k, v in sorted(result.items())}, "host_fn runs": len(calls)}

    return case


for _field in ("host_call", "eval_metrics"):
    _default(f"evaluate.cpu.{_field}=(fn, [])")(_without_tensors_case(_field))


@_default("export_saved_model.returns (str and bytes export_dir_base)")
def _(api):
    write_checkpoint(api)
    estimator = estimator_for(api, export_to_tpu=False)
    result = {}
    for kind, base in (("str", os.path.join(api.model_dir, "s")), ("bytes", os.path.join(api.model_dir, "b").encode())):
        path = _export(api, estimator, base)
        text = path.decode() if isinstance(path, bytes) else path
        result[kind] = {
            "type": type(path).__name__,
            "parent": normalise(os.path.dirname(text), api.model_dir),
            "name_is_a_timestamp": bool(re.fullmatch(r"\d{10}", os.path.basename(text))),
            "saved_model.pb": os.path.exists(os.path.join(text, "saved_model.pb")),
        }
    return result


def _loss() -> tf.Tensor:
    return tf.constant(1.0)


def _train_op() -> tf.Operation:
    return tf.no_op()


# --- TPUEstimatorSpec (construction) --------------------------------------------------------------


def _tpu_spec_case(mode: str | None, **kwargs: Any) -> Case:
    """`TPUEstimatorSpec(mode, **kwargs)` in a graph, with what `mode` requires (eval: a loss)."""

    def case(api):
        with tf.Graph().as_default():
            required = {
                "train": lambda: {"loss": _loss(), "train_op": _train_op()},
                "eval": lambda: {"loss": _loss()},
                "infer": lambda: {"predictions": {"y": _loss()}},
            }.get(mode, dict)()
            api.estimator.tpu.TPUEstimatorSpec(mode, **{**required, **kwargs})

    return case


def _metric_fn(labels, predictions):
    del labels, predictions
    return {}


def _metric_fn_with_default(labels, predictions=None):
    del labels, predictions
    return {}


def _metric_fn_varargs(*tensors):
    del tensors
    return {}


for _name in ("eval_metrics", "host_call"):
    for _key, _value in {
        "lambda": lambda: None,
        "(metric_fn,)": (_metric_fn,),
        "(metric_fn, [1, 2], 3)": (_metric_fn, [1, 2], 3),
        "(1, [1, 2])": (1, [1, 2]),
        "(metric_fn, 1)": (_metric_fn, 1),
        "(metric_fn, [1])": (_metric_fn, [1]),
        "(metric_fn, (1, 2, 3))": (_metric_fn, (1, 2, 3)),
        "(metric_fn, [1, 2])": (_metric_fn, [1, 2]),
        "[metric_fn, [1, 2]]": [_metric_fn, [1, 2]],
        "(metric_fn, {'a': 1})": (_metric_fn, {"a": 1}),
        "(metric_fn_with_default, [1])": (_metric_fn_with_default, [1]),
        "(metric_fn_varargs, [1, 2, 3])": (_metric_fn_varargs, [1, 2, 3]),
    }.items():
        _error(f"TPUEstimatorSpec.{_name}={_key}")(_tpu_spec_case("eval", **{_name: _value}))

for _name in ("training_hooks", "evaluation_hooks", "prediction_hooks"):
    _error(f"TPUEstimatorSpec.{_name}=[object()]")(_tpu_spec_case("eval", **{_name: [object()]}))
    _error(f"TPUEstimatorSpec.{_name}=[1]")(_tpu_spec_case("eval", **{_name: [1]}))
_error("TPUEstimatorSpec.mode=None")(_tpu_spec_case(None))
_error("TPUEstimatorSpec.mode='bogus'")(_tpu_spec_case("bogus"))
_error("TPUEstimatorSpec.mode=train without train_op")(_tpu_spec_case("train", train_op=None))
_error("TPUEstimatorSpec.mode=train without loss")(_tpu_spec_case("train", loss=None))
_error("TPUEstimatorSpec.mode=eval without loss")(_tpu_spec_case("eval", loss=None))
_error("TPUEstimatorSpec.mode=infer without predictions")(_tpu_spec_case("infer", predictions=None))
_error("TPUEstimatorSpec.loss=1.0")(_tpu_spec_case("eval", loss=1.0))
_error("TPUEstimatorSpec.predictions={'y': 1}")(_tpu_spec_case("infer", predictions={"y": 1}))
_error("TPUEstimatorSpec.export_outputs=1")(_tpu_spec_case("infer", export_outputs=1))
_error("TPUEstimatorSpec.export_outputs=1 (mode=eval)")(_tpu_spec_case("eval", export_outputs=1))
_error("TPUEstimatorSpec.scaffold_fn=1")(_tpu_spec_case("eval", scaffold_fn=1))


@_error("TPUEstimatorSpec._replace(mode='train') of an eval spec")
def _(api):
    with tf.Graph().as_default():
        spec = api.estimator.tpu.TPUEstimatorSpec("eval", loss=_loss())
        spec._replace(mode="train")


# --- EstimatorSpec (construction, in a graph) -----------------------------------------------------


_ESTIMATOR_SPEC_CASES: dict[str, Callable[[], dict]] = {
    "mode=train without train_op": lambda: {"mode": "train", "loss": _loss()},
    "mode=train without loss": lambda: {"mode": "train", "train_op": _train_op()},
    "mode=eval without loss": lambda: {"mode": "eval"},
    "mode=infer without predictions": lambda: {"mode": "infer"},
    "mode=None": lambda: {"mode": None},
    "mode='bogus'": lambda: {"mode": "bogus", "loss": _loss()},
    "loss=1.0": lambda: {"mode": "eval", "loss": 1.0},
    "loss of shape [2]": lambda: {"mode": "eval", "loss": tf.constant([1.0, 2.0])},
    "loss of shape [1]": lambda: {"mode": "eval", "loss": tf.constant([1.0])},
    "loss of shape [1, 1]": lambda: {"mode": "eval", "loss": tf.constant([[1.0]])},
    "train_op=1": lambda: {"mode": "train", "loss": _loss(), "train_op": 1},
    "predictions=1": lambda: {"mode": "infer", "predictions": 1},
    "predictions={'y': 1}": lambda: {"mode": "infer", "predictions": {"y": 1}},
    "eval_metric_ops=1": lambda: {"mode": "eval", "loss": _loss(), "eval_metric_ops": 1},
    "eval_metric_ops={'m': 1}": lambda: {
        "mode": "eval",
        "loss": _loss(),
        "eval_metric_ops": {"m": 1},
    },
    "export_outputs=1": lambda: {"mode": "infer", "predictions": _loss(), "export_outputs": 1},
    "export_outputs={'a': 1}": lambda: {
        "mode": "infer",
        "predictions": _loss(),
        "export_outputs": {"a": 1},
    },
    "training_hooks=[object()]": lambda: {"mode": "eval", "loss": _loss(), "training_hooks": [object()]},
    "training_chief_hooks=[1]": lambda: {"mode": "eval", "loss": _loss(), "training_chief_hooks": [1]},
    "evaluation_hooks=[1]": lambda: {"mode": "eval", "loss": _loss(), "evaluation_hooks": [1]},
    "prediction_hooks=[1]": lambda: {"mode": "eval", "loss": _loss(), "prediction_hooks": [1]},
    "scaffold=1": lambda: {"mode": "eval", "loss": _loss(), "scaffold": 1},
}


def _estimator_spec_case(make_kwargs: Callable[[], dict]) -> Case:
    def case(api):
        with tf.Graph().as_default():
            api.estimator.EstimatorSpec(**make_kwargs())

    return case


for _key, _make in _ESTIMATOR_SPEC_CASES.items():
    _error(f"EstimatorSpec.{_key}")(_estimator_spec_case(_make))


@_error("EstimatorSpec.loss from another graph")
def _(api):
    with tf.Graph().as_default():
        loss = tf.constant(1.0, name="other_loss")
    with tf.Graph().as_default():
        api.estimator.EstimatorSpec("eval", loss=loss)


@_error("EstimatorSpec._replace(mode='train') of an eval spec")
def _(api):
    with tf.Graph().as_default():
        api.estimator.EstimatorSpec("eval", loss=_loss())._replace(mode="train")


# --- defaults -------------------------------------------------------------------------------------

TPU_CONFIG_FIELDS = (
    "iterations_per_loop",
    "num_shards",
    "num_cores_per_replica",
    "per_host_input_for_training",
    "tpu_job_name",
    "initial_infeed_sleep_secs",
    "input_partition_dims",
    "eval_training_input_configuration",
    "experimental_host_call_every_n_steps",
    "experimental_allow_per_host_v2_parallel_get_next",
    "experimental_feed_hook",
)
RUN_CONFIG_ATTRIBUTES = (
    "model_dir",
    "tf_random_seed",
    "save_summary_steps",
    "save_checkpoints_steps",
    "save_checkpoints_secs",
    "keep_checkpoint_max",
    "keep_checkpoint_every_n_hours",
    "log_step_count_steps",
    "session_creation_timeout_secs",
    "checkpoint_save_graph_def",
    "experimental_max_worker_delay_secs",
    "protocol",
    "device_fn",
    "train_distribute",
    "eval_distribute",
    "session_config",
    "master",
    "evaluation_master",
    "task_type",
    "task_id",
    "is_chief",
    "num_ps_replicas",
    "num_worker_replicas",
    "global_id_in_cluster",
    "service",
)


def _plain(value: Any) -> Any:
    """JSON-able: None, bool, int, float, str, lists and dicts; other objects by type name."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return f"<{type(value).__name__}>"


NO_ATTRIBUTE = "<no attribute>"  # what `_attribute` returns for a missing attribute


def _attribute(config: Any, name: str) -> Any:
    """`config.<name>` as a plain value; `NO_ATTRIBUTE` when it has none (to show every difference)."""
    try:
        return _plain(getattr(config, name))
    except AttributeError:
        return NO_ATTRIBUTE


def tpu_config_fields(config: Any) -> dict:
    return {name: _attribute(config, name) for name in TPU_CONFIG_FIELDS}


def run_config_attributes(config: Any) -> dict:
    values = {name: _attribute(config, name) for name in RUN_CONFIG_ATTRIBUTES}
    cluster_spec = getattr(config, "cluster_spec", NO_ATTRIBUTE)
    values["cluster_spec"] = (
        cluster_spec.as_dict() if hasattr(cluster_spec, "as_dict") else _plain(cluster_spec)
    )
    return values


def tpu_run_config_attributes(config: Any) -> dict:
    values = run_config_attributes(config)
    values["cluster"] = _attribute(config, "cluster")
    values["tpu_config"] = tpu_config_fields(config.tpu_config)
    return values


@_default("ModeKeys")
def _(api):
    keys = api.estimator.ModeKeys
    return {"TRAIN": keys.TRAIN, "EVAL": keys.EVAL, "PREDICT": keys.PREDICT}


@_default("InputPipelineConfig")
def _(api):
    config = api.estimator.tpu.InputPipelineConfig
    names = ("PER_SHARD_V1", "PER_HOST_V1", "PER_HOST_V2", "BROADCAST", "SLICED")
    return {name: getattr(config, name) for name in names}


@_default("TPUConfig()")
def _(api):
    with tf_config(None):
        return tpu_config_fields(api.estimator.tpu.TPUConfig())


@_default("TPUConfig(per_host_input_for_training=False)")
def _(api):
    with tf_config(None):
        return tpu_config_fields(api.estimator.tpu.TPUConfig(per_host_input_for_training=False))


@_default("TPUConfig(iterations_per_loop='1h')")
def _(api):
    with tf_config(None):
        return tpu_config_fields(api.estimator.tpu.TPUConfig(iterations_per_loop="1h"))


@_default("TPUConfig is a tuple")
def _(api):
    config = api.estimator.tpu.TPUConfig(iterations_per_loop=3)
    return {
        "isinstance tuple": isinstance(config, tuple),
        "_replace": tpu_config_fields(config._replace(num_shards=8)),
    }


@_default("tpu.RunConfig()")
def _(api):
    with tf_config(None):
        return tpu_run_config_attributes(api.estimator.tpu.RunConfig())


@_default("RunConfig()")
def _(api):
    with tf_config(None):
        return run_config_attributes(api.estimator.RunConfig())


@_default("tpu.RunConfig(save_checkpoints_steps=100)")
def _(api):
    with tf_config(None):
        config = api.estimator.tpu.RunConfig(save_checkpoints_steps=100)
    return {name: getattr(config, name) for name in ("save_checkpoints_steps", "save_checkpoints_secs")}


@_default("tpu.RunConfig(save_checkpoints_secs=None)")
def _(api):
    with tf_config(None):
        config = api.estimator.tpu.RunConfig(save_checkpoints_secs=None)
    return {name: getattr(config, name) for name in ("save_checkpoints_steps", "save_checkpoints_secs")}


@_default("tpu.RunConfig(master='grpc://10.1.2.3:8470')")
def _(api):
    with tf_config(None):
        config = api.estimator.tpu.RunConfig(master="grpc://10.1.2.3:8470")
    return {"master": config.master, "evaluation_master": config.evaluation_master}


@_default("tpu.RunConfig(master='a',evaluation_master='')")
def _(api):
    with tf_config(None):
        config = api.estimator.tpu.RunConfig(master="a", evaluation_master="")
    return {"master": config.master, "evaluation_master": config.evaluation_master}


@_default("tpu.RunConfig().replace(...)")
def _(api):
    with tf_config(None):
        config = api.estimator.tpu.RunConfig(master="a", save_checkpoints_steps=10)
        replaced = config.replace(
            model_dir=api.model_dir,
            save_checkpoints_secs=30,
            tpu_config=api.estimator.tpu.TPUConfig(iterations_per_loop=7),
        )
    values = tpu_run_config_attributes(replaced)
    values["model_dir"] = normalise(values["model_dir"], api.model_dir)
    values["original unchanged"] = config.save_checkpoints_steps == 10 and config.model_dir is None
    return values


_TPU_TF_CONFIG = {
    "session_master": "grpc://10.0.0.1:8470",
    "eval_session_master": "grpc://10.0.0.2:8470",
    "service": {"tpu_worker_job_name": "my_tpu_worker"},
}


@_default("TF_CONFIG{session_master,eval_session_master,service}: tpu.RunConfig()")
def _(api):
    with tf_config(_TPU_TF_CONFIG):
        return tpu_run_config_attributes(api.estimator.tpu.RunConfig())


@_default("TF_CONFIG{session_master,eval_session_master,service}: tpu.RunConfig(master='a')")
def _(api):
    with tf_config(_TPU_TF_CONFIG):
        config = api.estimator.tpu.RunConfig(master="a")
    return {"master": config.master, "evaluation_master": config.evaluation_master}


@_default("TF_CONFIG{session_master}: tpu.RunConfig()")
def _(api):
    with tf_config({"session_master": "grpc://10.0.0.1:8470"}):
        config = api.estimator.tpu.RunConfig()
    return {
        "master": config.master,
        "evaluation_master": config.evaluation_master,
        "tpu_job_name": config.tpu_config.tpu_job_name,
    }


@_default("TF_CONFIG{service}: TPUConfig(tpu_job_name=...)")
def _(api):
    with tf_config(_TPU_TF_CONFIG):
        return {
            "default": api.estimator.tpu.TPUConfig().tpu_job_name,
            "given": api.estimator.tpu.TPUConfig(tpu_job_name="mine").tpu_job_name,
        }


@_default("TF_CONFIG{model_dir}: tpu.RunConfig()")
def _(api):
    path = os.path.join(api.model_dir, "from_tf_config")
    with tf_config({"model_dir": path}):
        config = api.estimator.tpu.RunConfig()
    return normalise(config.model_dir, api.model_dir)


_CLUSTER = {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]}


@_default("TF_CONFIG{cluster, task worker 1}: tpu.RunConfig()")
def _(api):
    with tf_config({"cluster": _CLUSTER, "task": {"type": "worker", "index": 1}}):
        return tpu_run_config_attributes(api.estimator.tpu.RunConfig())


@_default("TF_CONFIG{cluster, task evaluator}: tpu.RunConfig()")
def _(api):
    with tf_config({"cluster": _CLUSTER, "task": {"type": "evaluator", "index": 0}}):
        return tpu_run_config_attributes(api.estimator.tpu.RunConfig())


@_default("TPUEstimator attributes")
def _(api):
    estimator = estimator_for(api, params={"a": 1})
    config = estimator.config
    return {
        "model_dir": normalise(estimator.model_dir, api.model_dir),
        "params": _plain(estimator.params),
        "config.model_dir": normalise(config.model_dir, api.model_dir),
        "config.log_step_count_steps": config.log_step_count_steps,
        "config.save_checkpoints_secs": config.save_checkpoints_secs,
        "config.tpu_config.iterations_per_loop": config.tpu_config.iterations_per_loop,
        "config is a tpu.RunConfig": isinstance(config, api.estimator.tpu.RunConfig),
        "latest_checkpoint": estimator.latest_checkpoint(),
    }


@_default("TPUEstimator(model_dir=None) uses a temporary directory")
def _(api):
    with tf_config(None):
        config = api.estimator.tpu.RunConfig(tpu_config=tpu_config(api))
    estimator = estimator_for(api, config=config)
    return {
        "is a str": isinstance(estimator.model_dir, str),
        "exists": os.path.isdir(estimator.model_dir),
        "config.model_dir is the same": estimator.config.model_dir == estimator.model_dir,
    }


def _seen_params(params: dict) -> dict:
    seen = {"keys": sorted(params)}
    for key in ("batch_size", "use_tpu"):
        if key in params:
            seen[key] = _plain(params[key])
    if "context" in params:
        seen["context"] = type(params["context"]).__name__
    return seen


def _params_seen_case(use_tpu: bool, mode: str) -> Case:
    """What input_fn and model_fn find in `params` (and in the TPUContext, on the TPU path)."""

    def case(api):
        seen: dict[str, Any] = {}

        def recording_input_fn(params):
            seen["input_fn"] = _seen_params(params)
            context = params.get("context")
            if context is not None:
                deployment = context.current_input_fn_deployment()
                seen["input_fn"]["context"] = {
                    "current_host": context.current_host,
                    "num_replicas": context.num_replicas,
                    "num_hosts": context.num_hosts,
                    "num_of_replicas_per_host": context.num_of_replicas_per_host,
                    "current_input_fn_deployment()[1:]": list(deployment[1:]),
                }
            return (input_fn if mode != "predict" else predict_input_fn)(params)

        def make_spec(params, **_):
            seen["model_fn"] = _seen_params(params)
            context = params.get("context")
            if context is not None:
                seen["model_fn"]["context"] = {
                    "num_replicas": context.num_replicas,
                    "num_hosts": context.num_hosts,
                }
            raise Stop

        estimator = estimator_for(
            api, model_fn_for(api, make_spec), use_tpu=use_tpu, params={"a": 1},
            train_batch_size=4, eval_batch_size=2, predict_batch_size=2,
        )
        with contextlib.suppress(Stop):
            if mode == "train":
                estimator.train(recording_input_fn, max_steps=1)
            elif mode == "evaluate":
                estimator.evaluate(recording_input_fn, steps=1)
            else:
                list(estimator.predict(recording_input_fn))
        return seen

    return case


for _mode in ("train", "evaluate", "predict"):
    _default(f"params seen by input_fn and model_fn.cpu.{_mode}")(_params_seen_case(False, _mode))
    _default(f"params seen by input_fn and model_fn.use_tpu.{_mode}")(_params_seen_case(True, _mode))
