"""The TPU compile target: XLA's TPU compiler (libtpu, compile-only) on the one compile path.

Compiles here are small (a few seconds each) or out of memory (under a second); the
published full-size configurations are in benchmarks/tpu_published.py.
"""
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf import planning
from spatial_tf._tf_internals import hlo_pb2, xla_data_pb2
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.tpu import tpu_compile
from spatial_tf.emulator.xla import compile_cache
from spatial_tf.emulator.tpu.tpu_compile import (TpuCompilerUnavailable, TpuCompileTimeout,
                                                 compile_for_tpu, tpu_target)

from tpu_steps import conv_step, needs_libtpu


@pytest.fixture(autouse=True)
def cache_folder(tmp_path, monkeypatch):
    """Each test its own compile cache, so a test never reads another's results."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(compile_cache.ENV, str(folder))
    return folder


@pytest.fixture(scope="module")
def kernel():
    return tf.Variable(tf.ones([3, 3, 1, 8]))


# ------------------------------------------------------------------ targets


@pytest.mark.parametrize("name, expected", [
    ("v3", "v3"), ("V3-8", "v3-8"), ("v5litepod-16", "v5e-16"), ("trillium", "v6e"),
    ("v5p", "v5p"), ("ironwood", "tpu7x"),
])
def test_targets_fold_aliases_and_keep_slice_sizes(name, expected):
    assert tpu_target(name).name == expected


@pytest.mark.parametrize("value, message", [
    ("v9", "unknown TPU generation 'v9'; expected one of v2, v3, v4, v5e, v5p, v6e, tpu7x"),
    ("v3-big", "TPU slice 'v3-big': the part after the dash is 'big'; expected a positive "
               "number of TensorCores"),
])
def test_unknown_targets_are_refused_with_the_known_ones(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        tpu_target(value)
    with pytest.raises(TypeError, match="target is 3; expected a TPU generation"):
        tpu_target(3)


@pytest.mark.parametrize("name, devices", [
    ("v4-8", 4), ("v4-32", 16), ("v5p-8", 4), ("v3-8", 8), ("v3-32", 32),
    ("v5litepod-8", 8), ("v5e-16", 16), ("v6e-8", 8),
])
def test_a_slice_target_has_the_devices_tensorflow_sees(name, devices):
    from spatial_tf.topology.slices import SLICES, canonical_name

    assert tpu_target(name).slice_cores == devices
    assert tpu_target(name).name == name.replace("v5litepod", "v5e")
    if canonical_name(name) in SLICES:  # the slice record agrees
        assert SLICES[canonical_name(name)].num_cores == devices


def test_the_topology_holds_the_cores_asked_for():
    assert tpu_target("v3").generation.topology_for(8) == "v3:2x2"
    assert tpu_target("v3").generation.topology_for(9) == "v3:4x4"
    assert tpu_target("v5e").generation.topology_for(128) == "v5e:8x16"
    with pytest.raises(ValueError, match="no compile-only topology holds 256 devices"):
        tpu_target("v3").generation.topology_for(256)


# ------------------------------------------------------------------ the program handed over


def _traced(emulator, step, x):
    return emulator.lower(step, (x,)).traced


def test_copies_are_removed_and_their_users_read_the_copied_value(emulators, kernel):
    traced = _traced(emulators(2), conv_step(2, kernel), tf.ones([1, 16, 16, 1]))
    before = hlo_pb2.HloModuleProto.FromString(traced.hlo)
    copies = {i.id: i.operand_ids[0] for c in before.computations for i in c.instructions
              if i.opcode == "copy"}
    assert copies, "a program that writes a variable has copy instructions to remove"
    after = hlo_pb2.HloModuleProto.FromString(tpu_compile.strip_copies(traced.hlo))
    ids = {i.id for c in after.computations for i in c.instructions}
    assert not [i for c in after.computations for i in c.instructions if i.opcode == "copy"]
    for computation in after.computations:
        assert computation.root_id in ids
        for instruction in computation.instructions:
            assert set(instruction.operand_ids) <= ids
    assert sum(len(c.instructions) for c in after.computations) == \
        sum(len(c.instructions) for c in before.computations) - len(copies)


FLOAT64_VARIABLE = tf.Variable([0.5, 2.0], dtype=tf.float64)


def _resize_step(kernel):
    """A float32 train step with Keras' Resizing and tf.image.resize (bilinear) in it:
    TensorFlow lowers each, and its gradient, with a float64 scalar 0.5 converted to
    float32."""
    def resize_step(x):
        with tf.GradientTape() as tape:
            y = tf.nn.conv2d(spatial_tf.split(x, [1, 2, 1, 1]), kernel, 1, "SAME")
            y = tf.image.resize(keras.layers.Resizing(8, 8)(y), (16, 16))
            loss = tf.reduce_sum(y ** 2)
        return tape.gradient(loss, kernel)

    return resize_step


def test_a_bilinear_resize_in_a_float32_step_is_not_float64(emulators, kernel):
    traced = _traced(emulators(2), _resize_step(kernel), tf.ones([1, 16, 16, 1]))
    module = hlo_pb2.HloModuleProto.FromString(traced.hlo)
    f64 = [i for c in module.computations for i in c.instructions
           if i.shape.element_type == xla_data_pb2.F64]
    assert f64 and all(i.opcode == "constant" for i in f64)  # what the test is about
    assert not tpu_compile.has_float64(traced.hlo)


@pytest.mark.parametrize("step", [
    lambda x: tf.cast(tf.reduce_sum(tf.cast(x, tf.float64)), tf.float32),  # f64 arithmetic
    lambda x: (tf.reduce_sum(x), tf.constant(0.5, tf.float64)),  # an f64 constant returned
    lambda x: tf.reduce_sum(x) * tf.cast(FLOAT64_VARIABLE[0], tf.float32),  # a parameter
], ids=["arithmetic", "returned", "variable"])
def test_float64_beyond_a_converted_scalar_constant_is_float64(emulators, step):
    traced = _traced(emulators(1), step, tf.ones([4]))
    assert tpu_compile.has_float64(traced.hlo)


@needs_libtpu
def test_a_step_with_bilinear_resizes_compiles_for_tpu(kernel):
    on_tpu = Emulator(2).compile(_resize_step(kernel), (tf.ones([1, 16, 16, 1]),),
                                 target="v5e")
    assert on_tpu.fits


def test_a_float64_step_is_refused_before_anything_runs(emulators, monkeypatch):
    monkeypatch.setattr(tpu_compile, "check_compiler", lambda name, target: "0.0.0")
    monkeypatch.setattr(tpu_compile, "_run_worker", _no_worker)
    traced = _traced(emulators(1), lambda x: tf.reduce_sum(x * 2.0),
                     tf.ones([4], tf.float64))
    assert tpu_compile.has_float64(traced.hlo)
    with pytest.raises(ValueError, match="the step computes in float64, which a TPU does "
                                         "not have, so it cannot be compiled for TPU v3"):
        compile_for_tpu(traced.hlo, 1, "v3", name="step")


def _no_worker(*args, **kwargs):
    raise AssertionError("the TPU compiler's worker was started")


def test_libtpu_missing_or_mismatched_is_said_before_anything_runs(monkeypatch):
    monkeypatch.setattr(tpu_compile, "_run_worker", _no_worker)
    monkeypatch.setattr(tpu_compile, "libtpu_version", lambda: None)
    with pytest.raises(TpuCompilerUnavailable,
                       match=r"train_step: compiling for TPU v5e needs libtpu \(XLA's TPU "
                             r"compiler\), which is not installed. Fix: pip install "
                             r"\"spatial-tf\[tpu-compile\]\""):
        compile_for_tpu(b"", 4, "v5e", name="train_step")
    with pytest.raises(TpuCompilerUnavailable, match="Emulator: compiling for TPU v3 needs"):
        Emulator(2, target="v3")
    monkeypatch.setattr(tpu_compile, "libtpu_version", lambda: "0.0.30")
    monkeypatch.setattr(tpu_compile, "_libtpu_wanted", lambda: "0.0.42.*")
    with pytest.raises(TpuCompilerUnavailable,
                       match=r"libtpu 0.0.30 is installed but the installed jax was built "
                             r"for libtpu 0.0.42.\*"):
        compile_for_tpu(b"", 4, "v5e", name="train_step")


def test_more_cores_than_the_slice_holds_are_refused(monkeypatch):
    monkeypatch.setattr(tpu_compile, "check_compiler", lambda name, target: "0.0.0")
    with pytest.raises(ValueError, match="1 replica of 8 cores does not fit TPU v5e-4, "
                                         "which has 4 cores"):
        compile_for_tpu(b"", 8, "v5e-4", name="step")
    with pytest.raises(ValueError, match="Emulator: 1 replica of 8 cores does not fit TPU "
                                         "v4-8, which has 4 cores. Fix: a larger slice, e.g. "
                                         "target='v4'"):
        Emulator(8, target="v4-8")  # megacore: 8 TensorCores are 4 TensorFlow devices


# ------------------------------------------------------------------ the TPU compiler itself


@needs_libtpu
def test_a_split_step_compiles_for_tpu_with_less_memory_per_core(kernel, cache_folder):
    emulator = Emulator(4)
    step = conv_step(4, kernel)
    lowered = emulator.lower(step, (tf.ones([2, 256, 256, 1]),))
    on_tpu = lowered.compile("v5e")
    assert on_tpu is emulator.compile(step, (tf.ones([2, 256, 256, 1]),), target="v5e")
    assert on_tpu.fits and on_tpu.unpartitioned.fits
    split, whole = on_tpu.memory(), on_tpu.memory(partitioned=False)
    assert set(split) == {"argument", "output", "alias", "temp", "peak"}
    assert split["peak"] == split["argument"] + split["output"] - split["alias"] + split["temp"]
    # the 512 KiB image is held a quarter per core; the kernel whole on every core
    assert whole["argument"] >= 2 * 256 * 256 * 4
    assert split["argument"] < whole["argument"] / 3
    assert on_tpu.program.device_kind == "TPU v5 lite"
    assert on_tpu.cost_analysis()["flops"] > 0
    assert [c.kind for c in on_tpu.gathers()] == []
    assert "collective-permute" in {c.kind for c in on_tpu.collectives()}  # halo exchange
    assert "XLA:TPU v5e (libtpu" in on_tpu.source and "compile-only" in on_tpu.source
    assert len(list(cache_folder.glob("*.json"))) == 2  # partitioned and unpartitioned


@needs_libtpu
def test_a_v4_program_is_compiled_for_megacore_devices_as_tensorflow_sees_them(kernel):
    # a v4-8 is 4 chips: 4 TensorFlow devices of 32 GiB each, not 8 TensorCores of 16
    on_tpu = Emulator(4, target="v4-8").compile(
        conv_step(4, kernel), (np.broadcast_to(np.float32(0), [2, 32768, 32768, 1]),),
        target="v4-8")  # a zero-stride view: nothing of that size is allocated
    assert on_tpu.program.topology_devices == 4
    assert on_tpu.program.device_kind == "TPU v4"
    assert not on_tpu.fits  # an 8 GiB image's activations need more than a chip's HBM
    assert 30 * 2**30 < on_tpu.program.available_bytes <= 32 * 2**30


@needs_libtpu
def test_out_of_memory_is_the_compilers_verdict_with_its_figures(kernel):
    emulator = Emulator(2, target="v3")
    report = emulator.report(conv_step(2, kernel), (tf.TensorSpec([2, 16384, 16384, 1]),))
    tpu = report.tpu
    assert tpu["fits"] == {"partitioned": False, "unpartitioned": False}
    assert tpu["partitioned"] is None and tpu["unpartitioned"] is None
    assert tpu["verdict"]["partitioned"].startswith("does not fit a TPU v3 core: needs ")
    assert tpu["verdict"]["partitioned"].endswith("GiB available")
    text = str(report)
    assert "TPU v3 per core" in text and "does not fit" in text
    assert "step on 2 cores (2 virtual CPU devices)" in text
    assert "first columns XLA:CPU, TPU v3 columns XLA:TPU v3 (libtpu" in text
    assert "read from the compile cache" not in text
    again = str(emulator.report(conv_step(2, kernel), (tf.TensorSpec([2, 16384, 16384, 1]),)))
    assert "compile-only), both read from the compile cache" in again
    # the CPU figures are the emulator's own, as without a target
    assert report.partitioned == Emulator(2).report(
        conv_step(2, kernel), (tf.TensorSpec([2, 16384, 16384, 1]),)).partitioned


@needs_libtpu
def test_a_second_compile_reads_the_cache_and_starts_no_compiler(kernel, monkeypatch):
    step = conv_step(2, kernel)
    first = Emulator(2).compile(step, (tf.ones([1, 64, 64, 1]),), target="v6e")
    assert not first.program.cached
    monkeypatch.setattr(tpu_compile, "_run_worker", _no_worker)
    again = Emulator(2).compile(step, (tf.ones([1, 64, 64, 1]),), target="v6e")
    assert again.program.cached
    assert again.memory() == first.memory()
    assert again.collectives() == first.collectives()
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=false")
    with pytest.raises(AssertionError, match="worker was started"):  # other flags: not cached
        Emulator(2).compile(step, (tf.ones([1, 64, 64, 1]),), target="v6e")
    monkeypatch.delenv("LIBTPU_INIT_ARGS")
    monkeypatch.setenv(compile_cache.ENV, "off")  # cache off: the compiler must run
    with pytest.raises(AssertionError, match="worker was started"):
        Emulator(2).compile(step, (tf.ones([1, 64, 64, 1]),), target="v6e")


def _keras_step():
    """A Keras train step; each call builds a new model, whose layers and optimizer
    Keras numbers anew (``conv2d_3``, ``sgd_1``): the same program, other op names."""
    model = keras.Sequential([keras.Input((32, 32, 1)), keras.layers.Conv2D(4, 3),
                              keras.layers.GlobalAveragePooling2D()])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)

    def train_step(x):
        x = spatial_tf.split(x, [1, 2, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    return train_step, optimizer.name


@needs_libtpu
def test_the_same_program_with_other_op_names_shares_the_answer_with_its_own_names(
        monkeypatch):
    first_step, first = _keras_step()
    second_step, second = _keras_step()
    assert first != second  # what the test is about: Keras numbered them apart
    x = (tf.ones([1, 32, 32, 1]),)
    compiled = Emulator(2).compile(first_step, x, target="v5e")
    assert not compiled.program.cached and f'op_name="{first}/' in compiled.program.hlo_text
    monkeypatch.setattr(tpu_compile, "_run_worker", _no_worker)
    again = Emulator(2).compile(second_step, x, target="v5e")
    assert again.program.cached and again.memory() == compiled.memory()
    assert f'op_name="{second}/' in again.program.hlo_text
    assert f'op_name="{first}/' not in again.program.hlo_text
    # no op name of the first program is left (the compiler adds names of its own)
    named = set(re.findall(r'op_name="([^"]*)"', again.program.hlo_text))
    others = set(compile_cache.op_names(compiled.traced.hlo)) - set(
        compile_cache.op_names(again.traced.hlo))
    assert others and named & set(compile_cache.op_names(again.traced.hlo))
    assert not named & others


@needs_libtpu
def test_a_compile_past_its_time_limit_stops_and_caches_nothing(kernel, cache_folder):
    lowered = Emulator(2).lower(conv_step(2, kernel), (tf.ones([1, 128, 128, 1]),))
    with pytest.raises(TpuCompileTimeout, match=r"not done after 0.01 s, stopped; nothing "
                                                r"was cached"):
        lowered.compile("v4", timeout=0.01)
    assert not list(cache_folder.glob("*.json"))
    assert not list(cache_folder.glob("*.partial"))


@needs_libtpu
def test_the_planner_decides_with_the_tpu_compiler(kernel):
    w = tf.Variable(tf.ones([3, 3, 3, 1, 2]))

    def step(x):
        return tf.reduce_sum(tf.nn.conv3d(x, w, [1] * 5, "SAME"))

    small = spatial_tf.plan(step, (2, 16, 16, 16, 1), 2, budget="v5e",
                            options=planning.PlanOptions(progress=False))
    assert small.tpu_source.startswith("the TPU compiler for v5e (XLA:TPU, libtpu ")
    assert [c.fits for c in small.candidates] == [True, True]
    assert all(c.cpu == {} and c.tpu_fits for c in small.candidates)
    # the fastest predicted step of those the compiler fits
    assert small.recommended.step_time == min(c.step_time for c in small.candidates) > 0
    assert "the TPU compiler accepted it" in small.why
    huge = spatial_tf.plan(step, (1, 1024, 1024, 1024, 1), 2, budget="v3",
                           options=planning.PlanOptions(progress=False))
    assert huge.recommended is None
    assert [(c.spec, c.fits) for c in huge.candidates] == [((1, 2, 1, 1, 1), False)]
    assert all(c.peak() > 16 * 2**30 for c in huge.candidates)
    assert "refused every one as out of memory" in huge.why
    assert "> " in str(huge)
    estimated = spatial_tf.plan(step, (2, 16, 16, 16, 1), 2, budget="v5e",
                                options=planning.PlanOptions(progress=False, target=None))
    assert estimated.tpu_source is None and estimated.candidates[0].cpu
    assert "pip install 'spatial-tf[tpu-compile]'" in str(estimated)


def test_a_target_and_fit_sizes_exclude_each_other():
    with pytest.raises(ValueError, match="target='v3' compiles every candidate at the real "
                                         "size with the TPU compiler, so fit_sizes="):
        planning.PlanOptions(target="v3", fit_sizes=(16, 32))
    with pytest.raises(ValueError, match="unknown TPU generation 'v11'"):
        planning.PlanOptions(target="v11")


def test_the_worker_reports_a_compiler_that_cannot_start(tmp_path):
    """The worker itself, run as the parent runs it, on a topology libtpu does not know:
    it writes an error result and exits 0 instead of crashing."""
    import json
    import subprocess
    import sys

    from spatial_tf.emulator.tpu import _xla_tpu

    (tmp_path / "program.pb").write_bytes(b"")
    (tmp_path / "request.json").write_text(json.dumps(
        {"topology": "v99:1x1", "num_partitions": 1, "free_in": [], "propagate_out": False}))
    done = subprocess.run([sys.executable, "-m", "spatial_tf.emulator.tpu._xla_tpu",
                           str(tmp_path)], env={**os.environ, **_xla_tpu.ENVIRONMENT},
                          capture_output=True, timeout=120)
    assert done.returncode == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "error" and result["message"]
    assert np.isfinite(result["seconds"])


@needs_libtpu
def test_a_program_the_tpu_compiler_refuses_is_a_compile_error_naming_step_and_target():
    # annotated for 4 cores, handed over for 2: XLA's own refusal of an invalid sharding
    traced = Emulator(4).lower(lambda x: tf.reduce_sum(spatial_tf.split(x, [1, 4]) ** 2),
                               (tf.ones([4, 8]),)).traced
    with pytest.raises(spatial_tf.emulator.CompileError) as e:
        compile_for_tpu(traced.hlo, 2, "v5e", name="train_step",
                        propagation=tpu_compile.Propagation([True], True))
    message = str(e.value)
    assert message.startswith("train_step: the TPU compiler refused the step for TPU v5e "
                              "(2 cores): INVALID_ARGUMENT: ")
    assert "Invalid sharding" in message and "device 2 >= num_devices (2)" in message
    assert e.value.function == "train_step"


@needs_libtpu
def test_the_planners_figure_is_the_compilers_for_the_same_program():
    w = tf.Variable(tf.ones([3, 3, 3, 1, 4]))

    def step(x):
        return tf.reduce_sum(tf.nn.conv3d(x, w, [1] * 5, "SAME") ** 2)

    plan = spatial_tf.plan(step, (1, 32, 32, 32, 1), 2, budget="v4", specs=[(1, 2, 1, 1, 1)],
                           options=planning.PlanOptions(progress=False))

    def split_step(x):
        return step(spatial_tf.split(x, [1, 2, 1, 1, 1]))

    direct = Emulator(2).compile(split_step, (np.zeros([1, 32, 32, 32, 1], np.float32),),
                                 target="v4")
    assert plan.candidates[0].tpu == direct.memory()
    assert plan.candidates[0].halo_bytes == sum(
        c.bytes for c in direct.collectives() if c.kind == "collective-permute") > 0


@needs_libtpu
def test_several_replicas_compile_as_every_replica_of_the_pod(kernel):
    """A step whose gradient is summed across replicas needs every replica's program: the
    TPU compiler gets num_replicas x num_partitions devices, as the CPU emulator does."""
    emulator = Emulator(2, num_replicas=2, target="v5e")

    def step(x):
        x = spatial_tf.split(x, [1, 2, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)
        grad = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, kernel))
        kernel.assign_sub(0.01 * grad)
        return loss

    report = emulator.report(step, (tf.ones([2, 64, 64, 1]),))
    assert report.tpu["fits"] == {"partitioned": True, "unpartitioned": True}
    assert "all-reduce" in {c.kind for c in emulator.compile(
        step, (tf.ones([2, 64, 64, 1]),), target="v5e").collectives()}
    with pytest.raises(ValueError, match="2 replicas of 2 cores do not fit TPU v5e-2"):
        Emulator(2, num_replicas=2).compile(step, (tf.ones([2, 64, 64, 1]),), target="v5e-2")
