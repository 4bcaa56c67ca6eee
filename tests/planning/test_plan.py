"""plan(): candidates compiled on the emulator, ranked on budget, halo and resharding."""
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.models import unet3d
from spatial_tf.planning import Plan, PlanOptions


def _two_convs(shape):
    # depth 1: two 3x3x3 convolutions with batch norm, then 1x1x1 logits
    return unet3d(shape, num_classes=2, depth=1, base_filters=2)


def _conv_train_step():
    """A train step of two 3x3x3 convolutions (fwd + bwd + SGD update)."""
    w1 = tf.Variable(tf.ones([3, 3, 3, 1, 4]) * 0.1)
    w2 = tf.Variable(tf.ones([3, 3, 3, 4, 2]) * 0.1)

    def step(x):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv3d(x, w1, [1] * 5, "SAME"))
            loss = tf.reduce_sum(tf.nn.conv3d(h, w2, [1] * 5, "SAME") ** 2)
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(0.01 * g1)
        w2.assign_sub(0.01 * g2)
        return loss

    return step


CUBE, SLAB = (1, 2, 2, 2, 1), (1, 8, 1, 1, 1)


@pytest.fixture(scope="module")
def cube_volume():
    # 16^3 split 2x2x2: three faces of 8x8 per core and axis; 8x1x1: two faces of 16x16
    return spatial_tf.plan(_conv_train_step(), (1, 16, 16, 16, 1), 8, specs=[SLAB, CUBE],
                           options=PlanOptions(progress=False))


def test_cube_ranks_above_slab_where_halos_favour_the_cube(cube_volume):
    by_spec = {c.spec: c for c in cube_volume.candidates}
    assert by_spec[CUBE].halo_bytes < by_spec[SLAB].halo_bytes
    assert [c.spec for c in cube_volume.candidates] == [CUBE, SLAB]
    assert cube_volume.recommended.spec == CUBE
    assert all(c.resharding_bytes == 0 for c in cube_volume.candidates)
    assert all(c.all_reduce_bytes > 0 for c in cube_volume.candidates)  # gradient sums


def test_slab_ranks_above_cube_on_a_long_volume():
    # 32x8x8: slabs of 4x8x8 exchange 8x8 faces; 16x4x4 cubes exchange 4x4 and 16x4 faces
    p = spatial_tf.plan(_conv_train_step(), (1, 32, 8, 8, 1), 8, specs=[CUBE, SLAB],
                        options=PlanOptions(progress=False))
    by_spec = {c.spec: c for c in p.candidates}
    assert by_spec[SLAB].halo_bytes < by_spec[CUBE].halo_bytes
    assert [c.spec for c in p.candidates] == [SLAB, CUBE]


def test_budget_filter_excludes_what_does_not_fit(cube_volume):
    peaks = sorted(c.peak("tpu") for c in cube_volume.candidates)
    between = cube_volume.with_budget((peaks[0] + peaks[1]) // 2)
    first, second = between.candidates
    assert first.fits and not second.fits
    assert first.peak("tpu") == peaks[0]
    assert between.recommended is first
    # on XLA:CPU's figures both fit a budget of the larger CPU peak
    cpu = cube_volume.with_budget(max(c.cpu["peak"] for c in cube_volume.candidates), memory="cpu")
    assert all(c.fits for c in cpu.candidates) and cpu.recommended.spec == CUBE
    none = cube_volume.with_budget(peaks[0] - 1)
    assert none.recommended is None and not any(c.fits for c in none.candidates)
    assert none.why.startswith("No candidate fits ")
    assert "Use more cores, a smaller volume or bf16 activations." in none.why
    # the original plan is left as it was
    assert all(c.fits is None for c in cube_volume.candidates)


def test_str_and_to_dict(cube_volume):
    text = str(cube_volume)
    assert "step: 1x16x16x16x1 on 8 cores, per core, no budget" in text
    for header in ("rank", "spec", "peak CPU", "peak TPU est.", "halo", "resharding", "all-reduce"):
        assert header in text
    assert "[1,2,2,2,1]" in text and "an estimate" in text
    d = cube_volume.to_dict()
    assert d["recommended"] == list(CUBE) and d["num_cores"] == 8 and d["shape"] == [1, 16, 16, 16, 1]
    row = d["candidates"][0]
    assert row["spec"] == list(CUBE)
    assert row["communication_bytes"] == row["halo_bytes"] + row["resharding_bytes"]
    assert row["cpu"]["peak"] == row["cpu"]["argument"] + row["cpu"]["output"] - row["cpu"]["alias"] + row["cpu"]["temp"]
    assert row["tpu"]["peak"] > row["cpu"]["peak"]  # 1-4 channels pad to 128 lanes on TPU


def test_step_function_with_tensor_specs_and_a_dict_batch_in_parallel():
    w = tf.Variable(tf.ones([3, 3, 3, 1, 2]))

    def step(batch):
        y = tf.nn.conv3d(batch["image"], w, [1] * 5, "SAME")
        return tf.reduce_sum(y * batch["mask"][..., None])

    inputs = {"image": tf.TensorSpec((2, 16, 16, 16, 1)), "mask": (2, 16, 16, 16)}
    p = spatial_tf.plan(step, inputs, 4, budget="1GiB",
                        options=PlanOptions(workers=2, progress=False))
    assert [c.spec for c in p.candidates] == [(2, 2, 1, 1, 1), (1, 4, 1, 1, 1), (1, 2, 2, 1, 1)]
    assert all(c.ok and c.fits for c in p.candidates)
    assert p.candidates[0].halo_bytes < p.candidates[1].halo_bytes
    assert isinstance(p, Plan) and p.budget.usable == 2**30


def test_a_gather_names_the_tensorflow_op():
    def step(x):
        flat = tf.reshape(x, [-1, 16])  # merges split axes: XLA gathers the volume
        return tf.reduce_sum(tf.matmul(flat, tf.ones([16, 4])) ** 2)

    p = spatial_tf.plan(step, (1, 16, 16, 16, 1), 4, specs=[(1, 2, 2, 1, 1)],
                        options=PlanOptions(progress=False))
    c = p.candidates[0]
    assert c.resharding_bytes > 0 and any("Reshape" in op for op in c.resharding_ops)
    assert "gathers at" in str(p)


# ---------------------------------------------------------------- bad requests


def _conv_step(x):
    return tf.reduce_sum(x)


def test_cores_not_a_power_of_two():
    with pytest.raises(ValueError, match=r"num_cores_per_replica is 6; expected one of \[1, 2, 4, 8"):
        spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 6)


def test_rank_mismatch_between_shape_and_model():
    with pytest.raises(ValueError, match=r"plan: the input shape \[1, 16, 16, 1\] has rank 4 but "
                                         r"the model takes rank 5 inputs"):
        spatial_tf.plan(_two_convs((16, 16, 16, 1)), (1, 16, 16, 1), 2)


def test_rank_mismatch_between_spec_and_shape():
    with pytest.raises(ValueError, match=r"plan: spec \(1, 2, 1, 1\) does not match the input of "
                                         r"rank 5 \[1, 16, 16, 16, 1\]; expected 5 split counts"):
        spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, specs=[(1, 2, 1, 1)])
    with pytest.raises(ValueError, match=r"spec \[1, 4, 1, 1, 1\] does not split \[1, 16, 16, 16, 1\] "
                                         r"over 2 cores"):
        spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, specs=[(1, 4, 1, 1, 1)])


def test_unparsable_budget():
    with pytest.raises(ValueError, match=r"budget is 'v3.5'; expected a size or a TPU generation"):
        spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, budget="v3.5")


def test_a_model_that_does_not_compile():
    def step(x):
        values, _ = tf.unique(tf.reshape(x, [-1]))  # a data-dependent shape, returned
        return values

    with pytest.raises(ValueError) as e:
        spatial_tf.plan(step, (1, 8, 8, 8, 1), 2, options=PlanOptions(progress=False))
    message = str(e.value)
    assert message.startswith("plan: no candidate of step compiled on 2 cores for [1, 8, 8, 8, 1]: ")
    assert "Unique" in message
    assert "Fix: run it once with spatial_tf.Emulator(2).run(...)" in message


@pytest.mark.parametrize("kwargs, error, message", [
    ({"memory": "gpu"}, ValueError, r"plan: memory is 'gpu'; expected one of \('tpu', 'cpu'\)"),
    ({"fit_sizes": (16,)}, ValueError, r"plan: fit_sizes is \(16,\); expected at least 2"),
])
def test_bad_options(kwargs, error, message):
    with pytest.raises(error, match=message):
        spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, options=PlanOptions(**kwargs))


def test_bad_inputs_and_steps():
    with pytest.raises(TypeError, match=r"plan: step_or_model is int; expected a step function"):
        spatial_tf.plan(3, (1, 16, 16, 16, 1), 2)
    with pytest.raises(TypeError, match=r"plan: an input is str .*expected a shape"):
        spatial_tf.plan(_conv_step, ("image",), 2)
    with pytest.raises(ValueError, match=r"plan: no input of rank 3 or more among \[\[4, 4\]\]"):
        spatial_tf.plan(_conv_step, (4, 4), 2)
    with pytest.raises(ValueError, match=r"fit_sizes needs the model at edges \(16, 24\), but the "
                                         r"model takes only \[None, 16, 16, 16, 1\]"):
        spatial_tf.plan(_two_convs((16, 16, 16, 1)), (1, 64, 64, 64, 1), 2,
                        options=PlanOptions(fit_sizes=(16, 24)))


def test_keywords_of_earlier_releases_still_plan_and_say_where_they_moved():
    with pytest.warns(DeprecationWarning, match=r"plan\(\.\.\., progress=False\) is deprecated; "
                      r"pass options=PlanOptions\(progress=False\)\."):
        old = spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, specs=[(1, 2, 1, 1, 1)],
                              progress=False)
    new = spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, specs=[(1, 2, 1, 1, 1)],
                          options=PlanOptions(progress=False))
    assert old.candidates[0].cpu == new.candidates[0].cpu
    with pytest.warns(DeprecationWarning, match=r"pass training=Training\(loss='mse'\)"):
        from spatial_tf.planning.options import from_keywords

        options, training = from_keywords(None, None, {"loss": "mse", "bf16": True})
    assert (training.loss, options.bf16, options.memory) == ("mse", True, "tpu")
    with pytest.raises(TypeError, match=r"plan: 1 unexpected keyword argument budgte; "
                       r"expected those of PlanOptions \(bf16, fit_check, fit_only, fit_sizes, memory, "
                       r"progress, reserve, symmetric, target, timeout, workers\) or Training \(loss, model_fn, "
                       r"optimizer\)"):
        spatial_tf.plan(_conv_step, (1, 16, 16, 16, 1), 2, budgte="v3")


# ------------------------------------------------------------------ ranked by step time


def _timed(spec, step_time, halo, fits=True):
    from spatial_tf.planning.plan import Candidate

    peak = {"argument": 0, "output": 0, "alias": 0, "temp": 1 << 20, "peak": 1 << 20}
    return Candidate(tuple(spec), 4, tpu=peak, halo_bytes=halo, tpu_fits=fits,
                     step_time=step_time)


def _timed_plan(candidates):
    from spatial_tf.planning.budgets import parse_budget

    return Plan("step", (1, 64, 64, 1), 4, parse_budget("v5e"), "tpu", False, candidates,
                None, "", 1.0, tpu_source="the TPU compiler for v5e (XLA:TPU, libtpu x)")


def test_fitting_candidates_rank_by_predicted_step_time_then_communication():
    slow_quiet = _timed([1, 4, 1, 1], 0.020, halo=1 << 10)
    fast_chatty = _timed([1, 2, 2, 1], 0.010, halo=1 << 20)
    tie_quieter = _timed([1, 1, 4, 1], 0.010, halo=1 << 15)
    refused = _timed([4, 1, 1, 1], None, halo=0, fits=False)
    plan = _timed_plan([slow_quiet, refused, fast_chatty, tie_quieter]).with_budget("v5e")
    assert [c.spec for c in plan.candidates] == [
        (1, 1, 4, 1), (1, 2, 2, 1), (1, 4, 1, 1), (4, 1, 1, 1)]
    assert plan.recommended.spec == (1, 1, 4, 1)
    assert plan.why.startswith("Recommended [1,1,4,1]: fits v5e")
    assert "the shortest predicted TPU step (10.0 ms), against 10.0 ms for [1,2,2,1]" in plan.why
    text = str(plan)
    assert "step est." in text.splitlines()[1]
    assert "Step est.: seconds per step predicted from XLA:TPU's cost model" in text


def test_without_step_times_the_plan_ranks_by_communication_and_says_why():
    quiet, chatty = _timed([1, 4, 1, 1], None, 1 << 10), _timed([1, 2, 2, 1], None, 1 << 20)
    quiet.step_time_missing = chatty.step_time_missing = (
        "no step time for TPU v6e: Cloud TPU's v6e pages disagree")
    plan = _timed_plan([chatty, quiet]).with_budget("v5e")
    assert [c.spec for c in plan.candidates] == [(1, 4, 1, 1), (1, 2, 2, 1)]
    assert "it moves the least halo + resharding bytes per core" in plan.why
    assert "Step est.: none: no step time for TPU v6e" in str(plan)


@pytest.mark.skipif(__import__("spatial_tf.emulator.tpu.tpu_compile", fromlist=["x"])
                    .libtpu_version() is None,
                    reason="needs libtpu (XLA's TPU compiler): pip install "
                           "'spatial-tf[tpu-compile]'")
def test_ctrl_c_during_a_compile_ranks_the_candidates_compiled_and_lists_the_rest(
        tmp_path, monkeypatch):
    import signal
    import threading

    from spatial_tf.emulator.tpu import _xla_tpu
    from spatial_tf.emulator.xla import compile_cache

    monkeypatch.setenv(compile_cache.ENV, str(tmp_path))
    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))

    def step(x):
        return tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)

    shape, quiet = (2, 64, 64, 8), PlanOptions(progress=False)
    first = spatial_tf.plan(step, shape, 2, budget="v5e", specs=[(1, 2, 1, 1)], options=quiet)
    assert first.candidates[0].fits  # now in the cache: read back without a worker
    # the next compile's worker waits (the worker's test hook) until Ctrl-C arrives;
    # Python's own SIGINT handler, which pytest-xdist's workers replace, makes it Ctrl-C
    monkeypatch.setenv(_xla_tpu.TEST_SLEEP_ENV, "60")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(8.0, lambda: signal.raise_signal(signal.SIGINT))
    timer.start()
    try:
        plan = spatial_tf.plan(step, shape, 2, budget="v5e",
                               specs=[(1, 2, 1, 1), (2, 1, 1, 1)], options=quiet)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert [c.spec for c in plan.unfinished] == [(2, 1, 1, 1)]
    assert plan.unfinished[0].reason == "not compiled: stopped by Ctrl-C"
    assert plan.recommended.spec == (1, 2, 1, 1) and plan.recommended.cached
    assert "Not compiled: [2,1,1,1] (stopped by Ctrl-C)" in str(plan)
