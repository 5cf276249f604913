"""One-step EVAL executions gathered into one host run (`host_gather.GatheredSteps`)."""

import numpy as np
import pytest

from keras_tpu_estimator.host.gather import GATHER_STEPS, GatheredSteps


def execution(step, rows=4):
    """One step's arrays stacked over one step: labels `[1, rows]`, logits `[1, rows, 2]`, mask `[1, rows]`."""
    return [np.full([1, rows], step, np.int32), np.full([1, rows, 2], step / 10, np.float32), np.ones([1, rows])]


def test_gathered_executions_concatenate_in_order_over_steps():
    gathered = GatheredSteps(steps=3)
    assert not gathered and gathered.accepts(first_step=7)
    assert gathered.add(execution(0), first_step=7, steps=1) is False
    assert gathered.add(execution(1), first_step=7, steps=1) is False
    assert gathered and gathered.steps == 2
    assert gathered.add(execution(2), first_step=7, steps=1) is True  # three steps: enough to run
    arrays, first_step, steps = gathered.take()
    assert (first_step, steps) == (7, 3)
    assert [a.shape for a in arrays] == [(3, 4), (3, 4, 2), (3, 4)]
    np.testing.assert_array_equal(arrays[0][:, 0], [0, 1, 2])
    assert not gathered and gathered.steps == 0 and gathered.accepts(first_step=8)


def test_one_gathered_execution_is_returned_as_it_came():
    gathered = GatheredSteps()
    arrays = execution(5)
    gathered.add(arrays, first_step=0, steps=1)
    taken, _, steps = gathered.take()
    assert steps == 1 and all(a is b for a, b in zip(taken, arrays, strict=True))


def test_a_longer_execution_counts_all_its_steps():
    gathered = GatheredSteps()
    stacked = [np.concatenate(parts) for parts in zip(*[execution(i) for i in range(GATHER_STEPS - 1)], strict=True)]
    assert gathered.add(execution(0), first_step=0, steps=1) is False
    assert gathered.add(stacked, first_step=0, steps=GATHER_STEPS - 1) is True
    assert gathered.take()[2] == GATHER_STEPS


def test_large_host_tensors_run_before_the_step_limit():
    gathered = GatheredSteps(steps=1000, nbytes=3 * 1000)
    big = [np.zeros([1, 1000], np.uint8)]
    assert [gathered.add(big, first_step=0, steps=1) for _ in range(3)] == [False, False, True]


def test_executions_at_another_global_step_cannot_join():
    gathered = GatheredSteps()
    gathered.add(execution(0), first_step=3, steps=1)
    assert not gathered.accepts(first_step=4)
    with pytest.raises(ValueError, match="global step 3 cannot take one at 4"):
        gathered.add(execution(1), first_step=4, steps=1)
    gathered.clear()
    assert not gathered and gathered.accepts(first_step=4)
