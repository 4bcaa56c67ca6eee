"""Predicted TPU step times: the TPU compiler's cycles at the generation's clock, plus the
collectives priced from their bytes over the generation's links.

The hand-written programs below carry the compiler's fields as libtpu 0.0.42.1 prints them
(``backend_config={..."estimated_cycles":"N"...}``, ``known_trip_count``, async
``*-start``/``*-done`` pairs); the expected seconds are worked out here from Cloud TPU's
published figures, not read from the module under test.
"""
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.xla import compile_cache
from spatial_tf.emulator.tpu.step_time import NoStepTime, step_time

from tpu_steps import conv_step, needs_libtpu

# v3: 123 TFLOP/s per chip = 2 TensorCores x 2 MXUs x 128 x 128 x 2 flops x clock
V3_CLOCK = 123e12 / (2 * 2 * 128 * 128 * 2)
V3_LINK = 1e11  # bytes/s one way per ICI link (the scaling book's TPU table)


def _program(*entry, others=""):
    lines = "\n".join(f"  {line}" for line in entry)
    return (f"HloModule m, is_scheduled=true\n\n"
            f"%conv_body (p: bf16[8,8]) -> bf16[8,8] {{\n"
            f"  %p = bf16[8,8]{{1,0}} parameter(0)\n"
            f"  ROOT %c = bf16[8,8]{{1,0}} convolution(%p, %p), dim_labels=bf_io->bf\n}}\n\n"
            f"%add_body (p: f32[8]) -> f32[8] {{\n"
            f"  %p = f32[8]{{0}} parameter(0)\n"
            f"  ROOT %a = f32[8]{{0}} add(%p, %p)\n}}\n\n"
            f"{others}"
            f"ENTRY %main (p: f32[256], /*index=1*/q: f32[256]) -> f32[256] {{\n{lines}\n}}\n")


def _cycles(n):
    return f'backend_config={{"window_config":{{"estimated_cycles":"{n}"}}}}'


def test_cycles_are_added_by_what_they_compute_at_the_clock():
    text = _program(
        "%p = f32[256]{0} parameter(0)",
        f"%f1 = bf16[8,8]{{1,0}} fusion(%p), kind=kOutput, calls=%conv_body, {_cycles(3_000_000)}",
        f"%f2 = f32[8]{{0}} fusion(%f1), kind=kLoop, calls=%add_body, {_cycles(1_000_000)}",
        f"ROOT %c = f32[8]{{0}} copy(%f2), {_cycles(500_000)}",
    )
    t = step_time(text, "v3", num_cores=1, libtpu="0.0.42.1")
    assert t.parts == pytest.approx({"convolutions and matmuls": 3e6 / V3_CLOCK,
                                     "elementwise and reductions": 1e6 / V3_CLOCK,
                                     "layout copies": 0.5e6 / V3_CLOCK})
    assert t.seconds == pytest.approx(4.5e6 / V3_CLOCK)
    assert t.dominant() == "convolutions and matmuls"
    assert t.hidden == 0 and t.left_out == ()
    assert "(TPU v3, libtpu 0.0.42.1)" in str(t) and "estimated cycles" in t.source


def test_a_loop_counts_its_body_trip_count_times_and_an_unknown_one_once():
    body = ("%body (p: f32[8]) -> f32[8] {\n"
            f"  %f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(1000)}\n}}\n"
            "%cond (p: f32[8]) -> pred[] {\n"
            f"  %lt = pred[] fusion(%p), kind=kLoop, calls=%add_body, {_cycles(10)}\n}}\n")
    known = _program(
        "%p = f32[256]{0} parameter(0)",
        'ROOT %w = f32[8]{0} while(%p), condition=%cond, body=%body, '
        'backend_config={"known_trip_count":{"n":"5"}}', others=body)
    assert step_time(known, "v3", num_cores=1).seconds == pytest.approx(5 * 1010 / V3_CLOCK)
    unknown = _program("%p = f32[256]{0} parameter(0)",
                       "ROOT %w = f32[8]{0} while(%p), condition=%cond, body=%body", others=body)
    t = step_time(unknown, "v3", num_cores=1)
    assert t.seconds == pytest.approx(1010 / V3_CLOCK)
    assert t.left_out == ("loops of unknown trip count (counted once)",)


def test_a_conditional_counts_its_longest_branch():
    branches = "".join(
        f"%b{i} (p: f32[8]) -> f32[8] {{\n"
        f"  %f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(n)}\n}}\n"
        for i, n in ((0, 100), (1, 300), (2, 200)))
    text = _program("%p = s32[] parameter(0)",
                    "ROOT %c = f32[8]{0} conditional(%p, %p, %p, %p), "
                    "branch_computations={%b0, %b1, %b2}", others=branches)
    t = step_time(text, "v3", num_cores=1)
    assert t.seconds == pytest.approx(300 / V3_CLOCK)
    assert t.parts == pytest.approx({"elementwise and reductions": 300 / V3_CLOCK})


def test_synchronous_collectives_are_priced_from_bytes_and_group_size():
    # 1 MiB all-reduce over 4 cores: a bidirectional ring moves 2 x 3/4 of it over 2 links
    # 256 KiB halo to one neighbour over one link; 4 MiB gathered over 8 cores
    text = _program(
        "%p = f32[262144]{0} parameter(0)",
        f"%f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(1)}",
        "%ar = f32[262144]{0} all-reduce(%p), replica_groups={{0,1,2,3}}, to_apply=%add_body",
        "%cp = f32[65536]{0} collective-permute(%p), source_target_pairs={{0,1},{1,2}}",
        "ROOT %ag = f32[1048576]{0} all-gather(%p), replica_groups=[1,8]<=[8], dimensions={0}")
    t = step_time(text, "v3", num_cores=8)
    mib = 2**20
    assert t.parts["all-reduce"] == pytest.approx(2 * 3 / 4 * mib / (2 * V3_LINK))
    assert t.parts["collective-permute"] == pytest.approx(mib / 4 / V3_LINK)
    assert t.parts["all-gather"] == pytest.approx(7 / 8 * 4 * mib / (2 * V3_LINK))
    assert t.seconds == pytest.approx(sum(t.parts.values()))
    assert t.compute_seconds == pytest.approx(1 / V3_CLOCK)
    assert t.collective_seconds == pytest.approx(t.seconds - 1 / V3_CLOCK)


def test_an_async_collective_is_hidden_behind_the_work_between_start_and_done():
    # a 10 MB halo takes 100 us over one v3 link; 50 us of compute runs meanwhile
    cycles = round(50e-6 * V3_CLOCK)
    text = _program(
        "%p = f32[2500000]{0} parameter(0)",
        "%s = (f32[2500000]{0}, f32[2500000]{0}, u32[], u32[]) collective-permute-start(%p), "
        "source_target_pairs={{0,1}}",
        f"%f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(cycles)}",
        "ROOT %d = f32[2500000]{0} collective-permute-done(%s)")
    t = step_time(text, "v3", num_cores=2)
    assert t.parts["collective-permute"] == pytest.approx(50e-6, rel=1e-3)
    assert t.hidden == pytest.approx(50e-6, rel=1e-3)
    assert t.seconds == pytest.approx(100e-6, rel=1e-3)  # 50 us compute + 50 us exposed
    assert "of collectives hidden behind compute" in t.breakdown()


def test_a_fully_overlapped_collective_adds_nothing():
    text = _program(
        "%p = f32[1000]{0} parameter(0)",
        "%s = f32[1000]{0} all-reduce-start(%p), replica_groups={{0,1}}, to_apply=%add_body",
        f"%f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(1_000_000)}",
        "ROOT %d = f32[1000]{0} all-reduce-done(%s)")
    t = step_time(text, "v3", num_cores=2)
    assert t.seconds == pytest.approx(1e6 / V3_CLOCK)
    assert "all-reduce" not in t.parts and t.hidden > 0


def test_a_loop_inside_a_conditional_branch_is_weighed_by_its_trip_count():
    # branch b0: a 10-trip loop of 100 cycles (1000); b1: one 300-cycle fusion
    others = ("%body (p: f32[8]) -> f32[8] {\n"
              f"  %f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(100)}\n}}\n"
              "%cond (p: f32[8]) -> pred[] {\n  %c = pred[] constant(true)\n}\n"
              "%b0 (p: f32[8]) -> f32[8] {\n"
              "  %w = f32[8]{0} while(%p), condition=%cond, body=%body, "
              'backend_config={"known_trip_count":{"n":"10"}}\n}\n'
              "%b1 (p: f32[8]) -> f32[8] {\n"
              f"  %f = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%add_body, {_cycles(300)}\n}}\n")
    text = _program("%p = s32[] parameter(0)",
                    "ROOT %c = f32[8]{0} conditional(%p, %p, %p), branch_computations={%b0, %b1}",
                    others=others)
    assert step_time(text, "v3", num_cores=1).seconds == pytest.approx(1000 / V3_CLOCK)


def test_host_transfers_are_named_as_left_out():
    text = _program("%t = token[] after-all()",
                    "%i = ((f32[8]{0}), token[]) infeed(%t)",
                    f"ROOT %f = f32[8]{{0}} fusion(%i), kind=kLoop, calls=%add_body, {_cycles(9)}")
    t = step_time(text, "v3", num_cores=1)
    assert t.left_out == ("infeed (the input pipeline's transfers to the device)",)
    assert str(t).endswith("; not counted: infeed (the input pipeline's transfers to the "
                           "device)")


@pytest.mark.parametrize("name, reason", [
    ("v2", "Cloud TPU publishes no ICI bandwidth for v2"),
    ("v6e", "disagree on its MXUs per core"),
    ("tpu7x", "no MXU count or clock for TPU7x"),
])
def test_a_generation_without_published_timing_gets_no_time_and_the_reason(name, reason):
    text = _program(f"ROOT %f = f32[8]{{0}} fusion(%p), calls=%add_body, {_cycles(9)}")
    with pytest.raises(NoStepTime, match=f"no step time for TPU {name}: .*{reason}"):
        step_time(text, name, num_cores=1)


def test_a_program_without_estimates_is_refused():
    with pytest.raises(NoStepTime, match="carries no estimated cycles"):
        step_time(_program("ROOT %p = f32[256]{0} parameter(0)"), "v3", num_cores=1)


# ------------------------------------------------------------------ the TPU compiler itself


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))


@needs_libtpu
def test_a_compiled_split_step_is_predicted_faster_and_above_the_roofline(cache_folder):
    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))
    on_tpu = Emulator(4).compile(conv_step(4, kernel), (tf.ones([4, 512, 512, 8]),),
                                 target="v5e")
    split, whole = on_tpu.step_time(), on_tpu.step_time(partitioned=False)
    assert split.generation == "v5e" and split.num_cores == 4 and whole.num_cores == 1
    assert "collective-permute" in split.parts and "collective-permute" not in whole.parts
    assert 1.5 < whole.seconds / split.seconds <= 4.0
    # no program runs faster than its flops at v5e's peak (197 TFLOP/s, one core a chip)
    flops = on_tpu.unpartitioned.cost["flops"]
    assert whole.seconds >= flops / 197e12
    report = Emulator(4, target="v5e").report(conv_step(4, kernel), (tf.ones([4, 512, 512, 8]),))
    times = report.tpu["step_time"]
    assert times["partitioned"].seconds == pytest.approx(split.seconds)
    assert times["unpartitioned"].seconds == pytest.approx(whole.seconds)
    assert f"speed-up of the split {whole.seconds / split.seconds:.2f}x" in str(report)


@needs_libtpu
def test_a_step_that_does_not_fit_has_no_step_time(cache_folder):
    kernel = tf.Variable(tf.ones([3, 3, 1, 8]))
    report = Emulator(2, target="v3").report(conv_step(2, kernel),
                                             (tf.TensorSpec([2, 16384, 16384, 1]),))
    assert report.tpu["step_time"] == {"partitioned": None, "unpartitioned": None}
    assert "did not fit the step in one core's HBM" in report.tpu["step_time_missing"]
    assert "TPU v3 step time: none (partitioned: step: no step time" in str(report)


@needs_libtpu
def test_the_planner_times_one_core_as_the_report_times_the_unpartitioned_step(cache_folder):
    from spatial_tf import planning

    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))

    def step(x):  # the planner splits the input itself
        return tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)

    shape = (4, 512, 512, 8)
    one = spatial_tf.plan(step, shape, 1, budget="v5e",
                          options=planning.PlanOptions(progress=False))
    on_four = spatial_tf.plan(step, shape, 4, budget="v5e",
                              options=planning.PlanOptions(progress=False))
    report = Emulator(4, target="v5e").report(
        lambda x: step(spatial_tf.split(x, list(on_four.recommended.spec))),
        (tf.zeros(shape),))
    assert one.candidates[0].step_time == pytest.approx(
        report.tpu["step_time"]["unpartitioned"].seconds, rel=1e-6)
    assert on_four.recommended.step_time == pytest.approx(
        report.tpu["step_time"]["partitioned"].seconds, rel=1e-6)
    timed = [c.step_time for c in on_four.candidates if c.fits]
    assert len(timed) >= 2 and on_four.recommended.step_time == min(timed)


@needs_libtpu
def test_a_fit_only_compile_has_the_memory_and_no_step_time(cache_folder):
    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))
    lowered = Emulator(4).lower(conv_step(4, kernel), (tf.ones([4, 512, 512, 8]),))
    full, fit = lowered.compile("v5e"), lowered.compile("v5e", fit_only=True)
    assert fit is not full and fit is lowered.compile("v5e", fit_only=True)
    assert fit.fits and fit.program.fit_only and not full.program.fit_only
    assert fit.memory() == full.memory()
    with pytest.raises(NoStepTime, match="compiled for the fit only"):
        fit.step_time()
    assert full.step_time().seconds > 0
