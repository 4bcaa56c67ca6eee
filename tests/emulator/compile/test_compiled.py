"""``emulator.lower(fn, args).compile()``: a step inspected without running it."""
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.compile.compiled import CompiledStep, Lowered

pytestmark = pytest.mark.emulator


def _running_sum_step(x):
    # a [1, 2, 1, 1] split keeps rows apart; a running sum down the rows gathers them
    x = spatial_tf.split(x, [1, 2, 1, 1])
    return tf.reduce_sum(tf.cumsum(x, axis=1, name="running_sum") * x)


def test_lower_traces_without_compiling_and_compile_happens_once():
    emulator = spatial_tf.Emulator(2)
    x = tf.ones([2, 8, 8, 3])
    lowered = emulator.lower(_running_sum_step, (x,))
    assert isinstance(lowered, Lowered) and not lowered.is_compiled
    assert emulator.compiled_steps == ()          # lowered only: nothing compiled yet
    text = lowered.hlo_text()
    assert "custom_call_target=\"Sharding\"" in text and "devices=[1,2,1,1]" in text
    assert lowered.trace_seconds > 0
    compiled = lowered.compile()
    assert isinstance(compiled, CompiledStep) and lowered.is_compiled
    assert lowered.compile() is compiled
    assert emulator.compile(_running_sum_step, (tf.zeros([2, 8, 8, 3]),)) is compiled
    assert emulator.lower(_running_sum_step, (x,)) is lowered
    assert emulator.compiled_steps == (compiled,)
    other = emulator.lower(_running_sum_step, (tf.ones([2, 16, 8, 3]),))   # another shape
    assert other is not lowered and not other.is_compiled


def test_memory_is_per_core_with_the_peak_formula():
    emulator = spatial_tf.Emulator(2)
    compiled = emulator.compile(_running_sum_step, (tf.ones([2, 8, 8, 3]),))
    whole = 2 * 8 * 8 * 3 * 4
    split = compiled.memory()
    single = compiled.memory(partitioned=False)
    assert split["argument"] == whole // 2 and single["argument"] == whole
    for m, program in ((split, compiled.program), (single, compiled.unpartitioned)):
        stats = program.compiled.memory_stats()
        assert {k: m[k] for k in ("argument", "output", "alias", "temp")} == {
            k: stats[k] for k in ("argument", "output", "alias", "temp")}
        assert m["peak"] == stats["argument"] + stats["output"] - stats["alias"] + stats["temp"]


def test_collectives_name_the_tensorflow_op_and_gathers_filter_by_size():
    emulator = spatial_tf.Emulator(2)
    compiled = emulator.compile(_running_sum_step, (tf.ones([2, 8, 8, 3]),))
    gathers = compiled.gathers()
    assert gathers, compiled.hlo_text()
    assert all(c.kind in ("all-gather", "all-to-all") for c in gathers)
    assert any("running_sum" in c.op_name for c in gathers)
    assert set(gathers) <= set(compiled.collectives())
    largest = max(c.bytes for c in gathers)
    assert compiled.gathers(largest + 1) == []
    assert all(c.bytes >= largest for c in compiled.gathers(largest))
    assert "all-gather" in compiled.hlo_text() or "all-to-all" in compiled.hlo_text()


def test_report_comes_from_the_same_compile():
    emulator = spatial_tf.Emulator(2)
    compiled = emulator.compile(_running_sum_step, (tf.ones([2, 8, 8, 3]),))
    report = emulator.report(_running_sum_step, (tf.ones([2, 8, 8, 3]),))
    assert report.partitioned == compiled.memory()
    assert report.unpartitioned == compiled.memory(partitioned=False)
    assert report.collectives == compiled.collectives()
    assert compiled.report().to_dict() == report.to_dict()
    assert any("running_sum" in w for w in report.warnings)


def test_the_planner_compiles_through_the_same_path():
    from spatial_tf.emulator.compile.trace import CallSignature
    from spatial_tf.planning.compile import compile_candidate

    emulator = spatial_tf.Emulator(2)
    x = np.ones([2, 8, 8, 3], np.float32)
    measured = compile_candidate(emulator, _running_sum_step, CallSignature((x,), None),
                                 gather_threshold=1)
    (compiled,) = emulator.compiled_steps
    assert measured.cpu == compiled.memory()
    assert measured.resharding_bytes == sum(c.bytes for c in compiled.gathers())
    assert any("running_sum" in op for op in measured.resharding_ops)
