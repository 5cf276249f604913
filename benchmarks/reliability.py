"""Kill a training run with SIGKILL at N random moments, restart it, and check what is left.

Run: `.venv/bin/python -m benchmarks.reliability [--kills 20] [--max-steps 60] [--seed 0] [--keep DIR]`
from the repository root. About a minute and a half with the defaults on 2 cores (a worker
start costs ~3-8 s; 22 starts).

A worker (`--worker MODEL_DIR MAX_STEPS`, a separate process) trains a small
get_variable MLP with `tf.compat.v1.train.AdamOptimizer` through
`kte.TPUEstimator(...).train(input_fn, max_steps=MAX_STEPS)`, with op
determinism, `iterations_per_loop=2`, `save_checkpoints_steps=2` and a sleep
after each execution, so checkpoints are written all the time. Its input
resumes the data where the latest checkpoint left it (it skips
`checkpoint_step(latest)` batches), so a resumed run ends where an
uninterrupted one does. At the end it writes every variable of the latest
checkpoint (weights, Adam slots, global_step) to `final_<tag>.npz` next to
MODEL_DIR.

The driver runs one uninterrupted worker (the reference; it also measures
the start-up time, launch to the end of the first execution, and the
training time T), then starts the killed run N times and SIGKILLs it, in a
seeded, shuffled schedule of three kinds of kill:

* start-up (a fifth): uniform in 0.5 s .. the reference's start-up time
  after launch (imports, tracing, restore, the lock, the first execution);
* training (half): uniform in 0 .. 2 T free / (training kills + 1) after
  the first execution of that start (`free`: the share of T not already
  spent by one execution per kill), so the kills walk through the whole run
  and land in executions, sleeps and saves;
* save (three tenths): a save lasts ~3 ms, too short to hit from outside,
  so the worker gets `--kill-in-save D` and a `CheckpointSaverListener`
  starts a timer in `before_save` of its first new checkpoint that
  SIGKILLs the worker D (uniform 0..10 ms) later: before, inside or just
  after the bundle write and the state-file update.

A kill drawn after the run has finished is just counted. After each kill
the driver reads every tensor of every `model.ckpt-*.index` in model_dir,
checks that the latest checkpoint never goes back, and lists model_dir.
A save left unfinished shows as a new `_temp` / tempstate /
`checkpoint.tmp` name or as a bundle newer than the state file names.
Expected names: `checkpoint`, `model.ckpt-<N>.index`,
`model.ckpt-<N>.data-<i>-of-<n>`, `model.ckpt-<N>.meta`, `events.out.tfevents.*`, `graph.pbtxt`,
directories `eval*`, and the trainer's lock `keras_tpu_estimator.lock`
(counted apart: a killed trainer leaves it for the next start to take over).
Anything else (`model.ckpt-6_temp/`, `*.tempstate*`, `checkpoint.tmp*`) is a
stray file. Strays right after a kill are informational; after the final,
uninterrupted completion there must be none.

Exit code 1 when a checkpoint is unreadable, the latest checkpoint went
back, strays remain after the final run, the final global step is not
MAX_STEPS, or the final variables differ from the reference (max abs
diff > 1e-6); so it can run in CI. Exit code 2 when a worker fails on its
own (not killed): the tail of its log is printed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "keras_tpu_estimator.lock"
EXPECTED_FILES = re.compile(
    r"checkpoint|graph\.pbtxt|events\.out\.tfevents\..*"
    r"|model\.ckpt-\d+\.index|model\.ckpt-\d+\.data-\d+-of-\d+|model\.ckpt-\d+\.meta"
)
SAVING = re.compile(r"_temp$|\.tempstate|^checkpoint\.tmp")  # a save was in flight
TOLERANCE = 1e-6
TF_SEED = 7


# ----------------------------------------------------------------------------- worker


def worker(model_dir: str, max_steps: int, sleep: float, kill_in_save: float | None = None) -> None:
    """Trains to `max_steps`, resuming from model_dir; writes final_<tag>.npz next to it.

    With `kill_in_save`, SIGKILLs itself that many seconds after the first save of
    this start begins (a timer thread armed in `before_save`).
    """
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_tpu_estimator as kte
    from keras_tpu_estimator.model_dir.checkpoints import checkpoint_step

    tf.config.experimental.enable_op_determinism()
    parent, tag = os.path.split(os.path.abspath(model_dir))
    progress = os.path.join(parent, f"progress_{tag}")

    def model_fn(features, labels, mode, params):
        init = tf.compat.v1.glorot_uniform_initializer(seed=1)
        with tf.compat.v1.variable_scope("mlp"):
            w1 = tf.compat.v1.get_variable("hidden/kernel", [4, 16], initializer=init)
            b1 = tf.compat.v1.get_variable("hidden/bias", [16], initializer=tf.zeros_initializer())
            w2 = tf.compat.v1.get_variable("out/kernel", [16, 1], initializer=init)
        output = tf.matmul(tf.nn.relu(tf.matmul(features["x"], w1) + b1), w2)
        loss = tf.reduce_mean(tf.square(output - labels))
        train_op = tf.compat.v1.train.AdamOptimizer(0.01).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step()
        )
        return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(params):
        rng = np.random.RandomState(0)
        x = rng.randn(640, 4).astype(np.float32)
        y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
        dataset = dataset.repeat().batch(params["batch_size"], drop_remainder=True)
        latest = estimator.latest_checkpoint()  # resume the data where the checkpoint left it
        return dataset.skip(checkpoint_step(latest) if latest else 0)

    class Slow(keras.callbacks.Callback):
        """Writes the global step outside model_dir after each execution, then sleeps."""

        def on_train_batch_end(self, batch, logs=None):
            with open(progress + ".part", "w") as f:
                f.write(str(self.model.global_step))
            os.replace(progress + ".part", progress)  # the driver never reads half a file
            time.sleep(sleep)

    class KillInSave(tf.compat.v1.train.CheckpointSaverListener):
        def __init__(self, start_step):
            self.start_step, self.armed = start_step, False

        def before_save(self, session, global_step_value):
            if not self.armed and global_step_value > self.start_step:  # a new checkpoint
                self.armed = True
                timer = threading.Timer(kill_in_save, os.kill, (os.getpid(), signal.SIGKILL))
                timer.daemon = True
                timer.start()

    config = kte.RunConfig(
        model_dir=model_dir, save_checkpoints_steps=2, tf_random_seed=TF_SEED,
        tpu_config=kte.TPUConfig(iterations_per_loop=2),
    )
    estimator = kte.TPUEstimator(model_fn, config=config, train_batch_size=16)
    listeners = []
    if kill_in_save is not None:
        sys.setswitchinterval(1e-4)  # the timer thread gets the GIL within 0.1 ms
        latest = estimator.latest_checkpoint()
        listeners.append(KillInSave(checkpoint_step(latest) if latest else 0))
    estimator.train(input_fn, max_steps=max_steps, hooks=[Slow()], saving_listeners=listeners)
    values = {name: estimator.get_variable_value(name) for name in estimator.get_variable_names()}
    final = os.path.join(parent, f"final_{tag}.npz")
    with open(final + ".part", "wb") as f:
        np.savez(f, **values)
    os.replace(final + ".part", final)


# ----------------------------------------------------------------------------- driver


class Worker:
    """One start of the worker, its output appended to <work>/<tag>.log."""

    def __init__(self, work: str, tag: str, max_steps: int, sleep: float, kill_in_save: float | None = None):
        self.progress = os.path.join(work, f"progress_{tag}")
        self.log_path = os.path.join(work, f"{tag}.log")
        if os.path.exists(self.progress):
            os.remove(self.progress)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
        args = ["--worker", os.path.join(work, tag), str(max_steps), "--sleep", str(sleep)]
        if kill_in_save is not None:
            args += ["--kill-in-save", repr(kill_in_save)]
        with open(self.log_path, "a") as log:
            log.write(f"\n===== start at {time.strftime('%H:%M:%S')}\n")
            log.flush()
            self.started = time.monotonic()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.reliability", *args],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )

    def trained(self) -> bool:
        """Whether this start has finished an execution."""
        return os.path.exists(self.progress)

    def step(self) -> int:
        """The global step after this start's last execution (0 before the first)."""
        try:
            with open(self.progress) as f:
                return int(f.read() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_until_trained(self, timeout: float = 300) -> bool:
        """Waits for the first execution; False when the process exits first."""
        deadline = time.monotonic() + timeout
        while not self.trained():
            if self.process.poll() is not None:
                return self.trained()
            if time.monotonic() > deadline:
                self.process.kill()
                raise TimeoutError(f"the worker made no progress in {timeout} s; see {self.log_path}")
            time.sleep(0.001)
        return True

    def sleep_until(self, moment: float) -> None:
        """Sleeps until `moment` (monotonic) or until the process exits."""
        while time.monotonic() < moment and self.process.poll() is None:
            time.sleep(min(0.002, max(0.0, moment - time.monotonic())))

    def finish(self, timeout: float = 600) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def tail(self, lines: int = 40) -> str:
        with open(self.log_path) as log:
            return "".join(log.readlines()[-lines:])


def classify(model_dir: str) -> tuple[list[str], list[str], bool]:
    """(stray names, orphaned data files, lock present) of model_dir's top level."""
    names = sorted(os.listdir(model_dir)) if os.path.isdir(model_dir) else []
    strays, indexes = [], {n[: -len(".index")] for n in names if n.endswith(".index")}
    orphans = []
    for name in names:
        path = os.path.join(model_dir, name)
        if name == LOCK:
            continue
        if os.path.isdir(path):
            if not name.startswith("eval"):
                strays.append(name + "/")
        elif not EXPECTED_FILES.fullmatch(name):
            strays.append(name)
        elif ".data-" in name and name.split(".data-")[0] not in indexes:
            orphans.append(name)  # a data file whose index is gone (e.g. a kill mid-deletion)
        elif name.endswith(".meta") and name[: -len(".meta")] not in indexes:
            orphans.append(name)  # a .meta written before its index (a kill mid-save)
    return strays, orphans, LOCK in names


def read_checkpoints(model_dir: str) -> tuple[int, list[str]]:
    """Reads every tensor of every `model.ckpt-*.index`; (checkpoints read, unreadable ones)."""
    import tensorflow as tf

    prefixes = sorted(
        os.path.join(model_dir, n[: -len(".index")])
        for n in os.listdir(model_dir) if re.fullmatch(r"model\.ckpt-\d+\.index", n)
    )
    unreadable = []
    for prefix in prefixes:
        try:
            reader = tf.train.load_checkpoint(prefix)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
        except Exception as error:  # any failure to read counts
            unreadable.append(f"{os.path.basename(prefix)}: {type(error).__name__}: {error}"[:300])
    return len(prefixes), unreadable


def newest_index_step(model_dir: str) -> int:
    """The highest N of the `model.ckpt-<N>.index` files (0 when none)."""
    steps = [int(m.group(1)) for n in os.listdir(model_dir) if (m := re.fullmatch(r"model\.ckpt-(\d+)\.index", n))]
    return max(steps, default=0)


def latest_step(model_dir: str) -> int:
    """The step of the checkpoint the state file names (0 when none); -1 when it names a missing one."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(model_dir)
    if state is None or not state.model_checkpoint_path:
        return 0
    latest = tf.train.latest_checkpoint(model_dir)
    return int(latest.rsplit("-", 1)[1]) if latest else -1


def compare(reference: str, candidate: str) -> tuple[float, str]:
    """Max abs difference over all variables of two final_*.npz; inf when the names differ."""
    import numpy as np

    with np.load(reference) as a, np.load(candidate) as b:
        if sorted(a.files) != sorted(b.files):
            return float("inf"), f"names differ: {sorted(set(a.files) ^ set(b.files))}"
        diffs = {n: float(np.max(np.abs(a[n].astype(np.float64) - b[n].astype(np.float64)), initial=0.0))
                 for n in a.files}
    worst = max(diffs, key=diffs.get)
    return diffs[worst], worst


def fail_worker(worker_: Worker, code: int, what: str) -> None:
    print(f"\n{what} worker failed with exit code {code}; tail of {worker_.log_path}:\n{worker_.tail()}")
    sys.exit(2)


def quiet_import_tensorflow(log_path: str) -> None:
    """Imports TensorFlow once, before anything is timed, its C++ start-up lines sent to `log_path`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "w") as log:
        os.dup2(log.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def drive(args: argparse.Namespace) -> int:
    work = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="kte_reliability_")
    os.makedirs(work, exist_ok=True)
    quiet_import_tensorflow(os.path.join(work, "driver.log"))
    for tag in ("reference", "killed"):
        shutil.rmtree(os.path.join(work, tag), ignore_errors=True)
        for leftover in (f"final_{tag}.npz", f"{tag}.log", f"progress_{tag}"):
            if os.path.exists(os.path.join(work, leftover)):
                os.remove(os.path.join(work, leftover))
    began = time.monotonic()
    rng = random.Random(args.seed)
    print(f"work dir {work}; {args.kills} kills, max_steps {args.max_steps}, seed {args.seed}")

    # The reference: uninterrupted; measures start-up (launch to the end of the first
    # execution) and training (to the end of the last execution) times.
    ref = Worker(work, "reference", args.max_steps, args.sleep)
    ref.wait_until_trained()
    startup = time.monotonic() - ref.started
    trained_at = time.monotonic()
    while ref.process.poll() is None:
        if ref.step() < args.max_steps:
            trained_at = time.monotonic()
        time.sleep(0.005)
    code = ref.finish()
    if code != 0:
        fail_worker(ref, code, "the reference")
    training = trained_at - ref.started - startup
    ref_strays, _, _ = classify(os.path.join(work, "reference"))
    print(f"reference: start-up {startup:.1f} s, training {training:.1f} s, strays {len(ref_strays)}")

    # The schedule: a fifth of the kills in start-up, three tenths in a save, the rest anywhere
    # in training. A training kill costs at least its first execution (2 steps), a save kill
    # none; the training windows share what is left, so the run advances through its steps.
    model_dir = os.path.join(work, "killed")
    n_startup, n_save = round(args.kills * 0.2), round(args.kills * 0.3)
    n_train = args.kills - n_startup - n_save
    kinds = ["start-up"] * n_startup + ["save"] * n_save + ["training"] * n_train
    rng.shuffle(kinds)
    free = max(0.0, 1 - 2 * n_train / args.max_steps)
    window = 2 * training * free / (n_train + 1)
    phases = {"start-up": 0, "training": 0, "save": 0, "shutdown": 0, "after finish": 0}
    during_save = locks_left = stray_kills = checked = 0
    stray_names: dict[str, int] = {}
    unreadable: list[str] = []
    went_back: list[str] = []
    orphans_seen: set[str] = set()
    last = 0
    for kill in range(1, args.kills + 1):
        before, _, _ = classify(model_dir)
        before_newest = newest_index_step(model_dir) if os.path.isdir(model_dir) else 0
        target = kinds[kill - 1]
        delay = rng.uniform(0.0, 0.010) if target == "save" else 0.0
        w = Worker(work, "killed", args.max_steps, args.sleep, kill_in_save=delay if target == "save" else None)
        if target == "start-up":  # after launch
            delay = rng.uniform(0.5, max(0.6, startup))
            w.sleep_until(w.started + delay)
        elif target == "training":  # after the first execution
            delay = rng.uniform(0.0, window)
            if w.wait_until_trained():
                w.sleep_until(time.monotonic() + delay)
        else:  # the worker kills itself `delay` after its first new save begins (~3-12 ms long)
            w.sleep_until(time.monotonic() + 120)
        if target == "save" and w.process.poll() == -signal.SIGKILL:
            phase = "save"
        elif w.process.poll() is None:
            step = w.step()
            phase = "start-up" if not w.trained() else "training" if step < args.max_steps else "shutdown"
            w.process.send_signal(signal.SIGKILL)
        else:
            phase = "after finish"
        code = w.finish(timeout=60)
        if code == -signal.SIGKILL:
            pass
        elif code == 0:
            phase = "after finish"
        else:
            fail_worker(w, code, f"kill {kill}: the")
        phases[phase] += 1
        strays, orphans, lock = classify(model_dir)
        saving = [n for n in strays if SAVING.search(n.rstrip("/")) and n not in before]
        locks_left += lock and phase != "after finish"
        stray_kills += bool(strays)
        for name in strays:  # grouped by pattern: model.ckpt-N_temp/, checkpoint.tmp*
            pattern = re.sub(r"\d+", "N", re.sub(r"tmp[0-9a-f]+|tempstate\d+", "tmp*", name))
            stray_names[pattern] = stray_names.get(pattern, 0) + 1
        orphans_seen.update(orphans)
        count, bad = read_checkpoints(model_dir) if os.path.isdir(model_dir) else (0, [])
        checked += count
        unreadable += [f"after kill {kill}: {b}" for b in bad]
        step = latest_step(model_dir) if os.path.isdir(model_dir) else 0
        newest = newest_index_step(model_dir) if os.path.isdir(model_dir) else 0
        if newest > step >= 0 and newest != before_newest and phase != "after finish":
            saving.append("(bundle written, state file not yet)")
        during_save += bool(saving)
        if step < last:
            went_back.append(f"after kill {kill}: latest step {step} < {last}")
        last = max(last, step)
        when = f"+{delay * 1000:5.1f} ms" if target == "save" else f"+{delay:5.2f} s "
        print(f"kill {kill:3d}: {target:8s} {when} -> {phase:12s} latest step {step:4d}"
              f"{'  save in flight ' + ' '.join(saving) if saving else ''}{'  strays: ' + ' '.join(strays) if strays else ''}")

    # The final, uninterrupted completion.
    final_npz = os.path.join(work, "final_killed.npz")
    if os.path.exists(final_npz):
        os.remove(final_npz)
    w = Worker(work, "killed", args.max_steps, args.sleep)
    code = w.finish()
    if code != 0:
        fail_worker(w, code, "the final")
    final_strays, final_orphans, final_lock = classify(model_dir)
    count, bad = read_checkpoints(model_dir)
    checked += count
    unreadable += [f"after the final run: {b}" for b in bad]
    final_step = latest_step(model_dir)
    diff, worst = compare(os.path.join(work, "final_reference.npz"), final_npz)
    equal = diff <= TOLERANCE

    runtime = time.monotonic() - began
    print("\nreliability report")
    rows = [
        ("kills", f"{args.kills} (start-up {phases['start-up']}, training {phases['training']}, "
                  f"in a save by the worker's timer {phases['save']}, "
                  f"after the last execution {phases['shutdown']}, "
                  f"after the run finished {phases['after finish']})"),
        ("kills that left a save unfinished", f"{during_save} (a new _temp / tempstate / checkpoint.tmp, "
                                              "or a newer bundle than the state file names)"),
        ("checkpoints read", f"{checked} (every tensor, after each kill and the final run)"),
        ("unreadable checkpoints", f"{len(unreadable)}  (must be 0)"),
        ("latest checkpoint went back", f"{len(went_back)}  (must be 0)"),
        ("kills leaving strays", f"{stray_kills} (informational: " + (
            ", ".join(f"{n} x{c}" for n, c in sorted(stray_names.items())) or "none") + ")"),
        ("orphaned data files seen", f"{len(orphans_seen)} (informational: .data without .index)"),
        ("locks left by a kill", f"{locks_left} (informational; lock after the final run: {final_lock})"),
        ("strays after the final run", f"{len(final_strays)}  (must be 0){'  ' + ' '.join(final_strays) if final_strays else ''}"),
        ("final global step", f"{final_step}  (must be {args.max_steps})"),
        ("final variables vs reference", f"{'equal' if equal else 'DIFFER'} (max abs diff {diff:.3g}"
                                         f"{f', in {worst}' if diff else ''}; weights, Adam slots, global_step)"),
        ("reference strays", f"{len(ref_strays)}{'  ' + ' '.join(ref_strays) if ref_strays else ''}"),
        ("runtime", f"{runtime:.0f} s"),
    ]
    for label, value in rows:
        print(f"  {label:34s} {value}")
    for line in unreadable + went_back:
        print(f"  ! {line}")
    ok = not unreadable and not went_back and not final_strays and final_step == args.max_steps and equal
    print("PASS" if ok else "FAIL")
    if args.keep or not ok:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary dir)")
    parser.add_argument("--sleep", type=float, default=0.03, help="seconds slept after each execution")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL_DIR", "MAX_STEPS"), help=argparse.SUPPRESS)
    parser.add_argument("--kill-in-save", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.sleep, args.kill_in_save)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
