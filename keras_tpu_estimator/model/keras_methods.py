"""`KerasMethods`: the `keras.Model` methods an `EstimatorModel` inherits, with an estimator meaning.

Keras' own versions assume layers called on inputs and a config that
rebuilds the model; an `EstimatorModel` has a `model_fn` and TF1-named
variables instead. So each inherited method either works on those variables
or raises one error that names the supported way:

- `summary()` lists every `model_fn` variable by TF1 name;
- `layers` is one view layer whose `weights` are the model's (so
  `TensorBoard(histogram_freq=1)` writes a histogram per variable);
- `set_weights` never moves `global_step` (`EarlyStopping(restore_best_weights=True)`);
  `load_weights` restores it (`BackupAndRestore` resumes at its step);
- `export(path)` writes the serving SavedModel of `export_saved_model` at `path`;
- `save`, `get_config`, `to_json`, `from_config` (and `ModelCheckpoint("m.keras")`)
  raise, naming `export`, `save_weights` and checkpoints in `model_dir`.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.export import (
    TensorServingInputReceiver,
    build_raw_serving_input_receiver_fn,
    export_saved_model,
)
from keras_tpu_estimator.inputs import unpack
from keras_tpu_estimator.model_dir import write_checkpoint

from .summary_table import variable_table

_NOTHING_BUILT = "nothing built yet: call fit/evaluate/predict or trace first"
_SAVED_MODEL_ENTRIES = (
    "saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "variables", "assets", "assets.extra",
)
_EXPORT_KWARGS = ("assets_extra", "as_text")
_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def unsupported_message(what: str) -> str:
    """The error text for a Keras saving method an `EstimatorModel` cannot support.

    Example:

    ```python
    message = unsupported_message("`get_config()`")   # what get_config() raises
    assert "save_weights" in message
    ```
    """
    return (
        f"EstimatorModel does not support {what}: the model is a `model_fn`, which Keras "
        "cannot serialize to a config or a `.keras` file. Use instead:\n"
        "  - for serving: `model.export(path)` (a SavedModel with a `serving_default` "
        "signature), or `keras_tpu_estimator.export.export_saved_model` / `SavedModelExporter`;\n"
        "  - for weights: `model.save_weights('x.weights.h5')` and `load_weights`, or "
        "`keras.callbacks.ModelCheckpoint('x.weights.h5', save_weights_only=True)`;\n"
        "  - for checkpoints: `CheckpointSaver(model_dir)` (TF1-named `model.ckpt-<step>` "
        "in `model_dir`, as TPUEstimator wrote them)."
    )


def _model_list(attribute: str) -> property:
    return property(lambda view: getattr(view._model(), attribute), doc=f"The model's `{attribute}`.")


class ModelFnVariables(keras.layers.Layer):
    """The single entry of `EstimatorModel.layers`: a view of the model's variables.

    It owns no variable (so `model.weights` and `.weights.h5` files count each
    once); its `weights` are the model's own, whose `path`s are TF1 names, for
    code that walks `model.layers` (Keras' `TensorBoard` histograms).

    Example:

    ```python
    (view,) = model.layers
    [w.path for w in view.weights]  # ["mlp/hidden/kernel", ..., "global_step"]
    ```
    """

    def __init__(self, model: keras.Model):
        super().__init__(name="model_fn_variables")
        self._model_ref = weakref.ref(model)
        self.built = True

    def _model(self) -> keras.Model:
        model = self._model_ref()
        if model is None:
            raise ReferenceError("The EstimatorModel of this view was deleted.")
        return model

    weights = variables = _model_list("weights")
    trainable_weights = trainable_variables = _model_list("trainable_weights")
    non_trainable_weights = non_trainable_variables = _model_list("non_trainable_weights")

    def save_own_variables(self, store: Any) -> None:
        """Saves nothing: the model saves its variables itself."""

    def load_own_variables(self, store: Any) -> None:
        """Loads nothing: the model loads its variables itself."""

    def call(self, inputs: Any) -> Any:
        raise NotImplementedError("The model_fn variables view cannot be called; use `model.predict`.")


def _raw_receiver_fn(features: Any) -> Callable[[], Any]:
    """A receiver fn of placeholders shaped like `features` (TensorSpecs), batch dimension None."""
    flat = dict(features) if isinstance(features, Mapping) else {"input": features}
    for name, spec in flat.items():
        if type(spec) is not tf.TensorSpec or spec.shape.rank in (None, 0):
            raise ValueError(
                "export() derives its serving inputs from the features, which must be a "
                "batched tf.TensorSpec or a flat dict of them; feature "
                f"{name!r} is {spec!r}. Pass `serving_input_receiver_fn=` "
                "(for example `kte.export.build_raw_serving_input_receiver_fn`)."
            )
    if isinstance(features, Mapping):
        return build_raw_serving_input_receiver_fn(features)

    def receiver_fn() -> Any:
        tensor = tf.compat.v1.placeholder(features.dtype, [None, *features.shape[1:]], name="input")
        return TensorServingInputReceiver(tensor, tensor)

    return receiver_fn


def _replace_saved_model(source: str, target: str) -> None:
    """Moves the SavedModel directory `source` to `target`, replacing a SavedModel there."""
    if not tf.io.gfile.exists(target):
        tf.io.gfile.rename(source, target)
        return
    if not tf.io.gfile.isdir(target):
        raise FileExistsError(f"export() writes a SavedModel directory, but {target!r} is a file.")
    for entry in _SAVED_MODEL_ENTRIES:
        path = os.path.join(target, entry)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    for entry in tf.io.gfile.listdir(source):
        entry = entry.rstrip("/")
        tf.io.gfile.rename(os.path.join(source, entry), os.path.join(target, entry))


class KerasMethods:
    """The `keras.Model` methods of `EstimatorModel`, for `model_fn` variables (a mixin).

    Expects the model's `variables_by_name`, `global_step_variable`,
    `checkpoint_variables`, `model_fn`, `params`, `config` and `_runner`.

    Example:

    ```python
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
    model.summary()                                   # every model_fn variable by TF1 name
    model.export(os.path.join(model_dir, "serving"))  # a SavedModel for tf.saved_model.load
    try:
        model.save(os.path.join(model_dir, "m.keras"))
    except NotImplementedError as error:              # naming the supported ways
        print(error)
    ```
    """

    # ----------------------------------------------------------------- layers
    @property
    def layers(self) -> list:
        """Keras' layers plus one `ModelFnVariables` view listing the `model_fn` variables.

        Example:

        ```python
        [w.path for layer in model.layers for w in layer.weights]  # TF1 names
        ```
        """
        view = _VIEWS.get(self)
        if view is None:
            view = _VIEWS[self] = ModelFnVariables(self)
        return [*super().layers, view]

    @layers.setter
    def layers(self, _: Any) -> None:
        raise AttributeError(
            "`Model.layers` attribute is reserved and should not be used. Please use another name."
        )

    # ----------------------------------------------------------------- summary
    def summary(
        self,
        line_length: int | None = None,
        positions: list[float] | None = None,
        print_fn: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Prints every `model_fn` variable: TF1 name, shape, dtype, trainable, parameters.

        Then the totals, as Keras' summary does. `print_fn` (default `print`) is
        called once with the whole text. `positions` are the right edges of the
        5 columns (fractions of `line_length`, or characters); `layer_range`
        (two regexes) selects variables by name; `expand_nested` and
        `show_trainable` are accepted and have no effect (trainable is always shown).

        Example:

        ```python
        model.summary()
        lines = []; model.summary(print_fn=lines.append)
        ```
        """
        unknown = set(kwargs) - {"expand_nested", "show_trainable", "layer_range"}
        if unknown:
            raise TypeError(f"summary() got unexpected keyword arguments {sorted(unknown)}")
        print_fn = print_fn or print
        title = f'Model: "{self.name}"'
        if not self.built:
            print_fn(f"{title}\n {_NOTHING_BUILT}.")
            return
        optimizer = [v for n, v in self.checkpoint_variables.items() if n.startswith("keras_optimizer/")]
        table = variable_table(self.variables_by_name, optimizer, line_length, positions, kwargs.get("layer_range"))
        print_fn(f"{title}\n{table}")

    # ----------------------------------------------------------------- weights
    def set_weights(self, weights: list) -> None:
        """Sets `model.weights` from arrays, as Keras does, except `global_step`, which keeps its value.

        Restoring weights never moves the step counter, so
        `EarlyStopping(restore_best_weights=True)` leaves `global_step` at the
        steps trained. `load_weights` differs: it restores `global_step` too,
        so `BackupAndRestore` resumes at the step it saved.

        Example:

        ```python
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
        best = model.get_weights()
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)])
        model.set_weights(best)  # the weights of then; model.global_step is unchanged
        ```
        """
        variables = self.weights
        if len(variables) != len(weights):
            raise ValueError(
                f"You called `set_weights(weights)` on layer '{self.name}' with a weight list of "
                f"length {len(weights)}, but the layer was expecting {len(variables)} weights."
            )
        step = self.global_step_variable
        for variable, value in zip(variables, weights, strict=True):
            if tuple(variable.shape) != tuple(np.shape(value)):
                raise ValueError(
                    f"Layer {self.name} weight shape {variable.shape} is not compatible with "
                    f"provided weight shape {np.shape(value)} (variable '{variable.path}')."
                )
        for variable, value in zip(variables, weights, strict=True):
            if variable is not step:
                variable.assign(value)

    def load_weights(self, filepath: str | os.PathLike, skip_mismatch: bool = False, **kwargs: Any) -> None:
        """Keras' `load_weights` (`.weights.h5`); restores `global_step` too, unlike `set_weights`.

        The file holds `model.weights` in order, so the loading model must have
        built the same modes (the same variables) as the saving one.

        Example:

        ```python
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
        model.save_weights(os.path.join(model_dir, "m.weights.h5"))
        model.load_weights(os.path.join(model_dir, "m.weights.h5"))  # weights and global_step as saved
        ```
        """
        super().load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)
        if self._driver.cached_global_step is not None:  # loaded inside fit (a callback)
            self._driver.cached_global_step = int(self.global_step_variable.numpy())

    # ----------------------------------------------------------------- saving
    def save(self, filepath: str | os.PathLike, overwrite: bool = True, zipped: bool | None = None, **kwargs: Any) -> None:
        """Not supported: raises, naming `export`, `save_weights` and checkpoints in `model_dir`.

        `NotImplementedError` for `.keras` and `.h5` paths (as Keras raised for
        this model), `ValueError` for other paths (as Keras does).
        `keras.callbacks.ModelCheckpoint("m.keras")` calls it.

        Example:

        ```python
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
        model.save_weights(os.path.join(model_dir, "m.weights.h5"))  # instead of model.save("m.keras")
        ```
        """
        path = os.fsdecode(filepath) if isinstance(filepath, (str, bytes, os.PathLike)) else str(filepath)
        error = NotImplementedError if path.endswith((".keras", ".h5")) else ValueError
        raise error(unsupported_message(f"`save({path!r})`"))

    def get_config(self) -> dict:
        """Not supported: raises `NotImplementedError` naming the supported ways to save.

        Example: `model.export("/tmp/serving")` rather than `model.get_config()`.
        """
        raise NotImplementedError(unsupported_message("`get_config()`"))

    def to_json(self, **kwargs: Any) -> str:
        """Not supported: raises `NotImplementedError` naming the supported ways to save.

        Example: `model.save_weights("/tmp/m.weights.h5")` rather than `model.to_json()`.
        """
        raise NotImplementedError(unsupported_message("`to_json()`"))

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Any:
        """Not supported: raises `NotImplementedError`; build the model from its `model_fn`.

        Example: `EstimatorModel(model_fn, params=params)` rather than `from_config(config)`.
        """
        raise NotImplementedError(
            unsupported_message("`from_config()`")
            + "\nBuild a new model with `EstimatorModel(model_fn, params=..., config=...)`."
        )

    # ----------------------------------------------------------------- export
    def export(
        self,
        filepath: str | os.PathLike,
        format: str = "tf_saved_model",
        verbose: bool | None = True,
        input_signature: Any = None,
        serving_input_receiver_fn: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Writes the serving SavedModel (`serve` tag, `serving_default` signature) at `filepath`.

        The SavedModel `export_saved_model` writes for CPU serving, from the
        current variables, at exactly `filepath` (replacing a SavedModel
        there), as Keras' `export` does.

        Args:
            filepath: The SavedModel directory.
            format: Only "tf_saved_model".
            verbose: Print where the SavedModel went (None, as in Keras, prints).
            input_signature: The features as `tf.TensorSpec`s (a spec, a dict of
                them, or a one-element list of either); used when no
                `serving_input_receiver_fn` is given.
            serving_input_receiver_fn: Returns a `ServingInputReceiver`. Without
                it (and `input_signature`) the inputs are placeholders shaped
                like the features of the PREDICT input (else TRAIN, else EVAL),
                with any batch size.
            **kwargs: `assets_extra`, `as_text` as `export_saved_model`.

        Raises:
            ValueError: another `format`, or no way to know the serving inputs.

        Example:

        ```python
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
        model.export(os.path.join(model_dir, "serving"))
        serve = tf.saved_model.load(os.path.join(model_dir, "serving")).signatures["serving_default"]
        serve(x=tf.constant(x))
        ```
        """
        if format != "tf_saved_model":
            raise ValueError(
                "EstimatorModel exports only format='tf_saved_model' (the SavedModel of "
                f"`export_saved_model`). Received: format={format!r}"
            )
        unknown = set(kwargs) - set(_EXPORT_KWARGS)
        if unknown:
            raise ValueError(
                f"EstimatorModel.export accepts {list(_EXPORT_KWARGS)} as extra arguments "
                f"(of `export_saved_model`). Received: {sorted(unknown)}"
            )
        receiver_fn = serving_input_receiver_fn or _raw_receiver_fn(self._serving_features(input_signature))
        target = os.fsdecode(filepath).rstrip("/") or "/"
        parent = os.path.dirname(target) or "."
        base = os.path.join(parent, f".{os.path.basename(target)}-export-{uuid.uuid4().hex[:8]}")
        tf.io.gfile.makedirs(parent)
        try:
            with tempfile.TemporaryDirectory() as scratch:
                prefix = write_checkpoint(os.path.join(scratch, "model.ckpt"), self.checkpoint_variables)
                written = export_saved_model(
                    base, receiver_fn, self.model_fn, prefix, params=self.params, config=self.config,
                    export_to_cpu=True, export_to_tpu=False, **kwargs,
                )
            _replace_saved_model(os.fsdecode(written), target)
        finally:
            if tf.io.gfile.exists(base):
                tf.io.gfile.rmtree(base)
        if verbose or verbose is None:
            print(
                f"Saved artifact at '{target}'. Serve it with "
                f"`tf.saved_model.load({target!r}).signatures['serving_default']`."
            )

    def _serving_features(self, input_signature: Any) -> Any:
        """The features' `TensorSpec`s for a derived receiver: `input_signature`, else a built mode's."""
        if input_signature is not None:
            if isinstance(input_signature, (list, tuple)) and len(input_signature) == 1:
                return input_signature[0]
            return input_signature
        for mode in (ModeKeys.PREDICT, ModeKeys.TRAIN, ModeKeys.EVAL):
            record = self._runner.modes.get(mode)
            if record is not None and record.element_spec is not None:
                return unpack(record.element_spec)[0]
        raise ValueError(
            "export() cannot tell the serving inputs: nothing is built yet. Call "
            "fit/evaluate/predict or trace first, or pass `serving_input_receiver_fn=` "
            "(or `input_signature=`)."
        )


__all__ = ["KerasMethods", "ModelFnVariables", "unsupported_message"]
