"""Collective sizes from hand-written HLO text lines: every sync and async form XLA prints.

Sizes are the per-core result of the collective; each expected value is worked out by
hand from the shapes written in the line.
"""
import pytest

from spatial_tf.emulator.xla.hlo_text import collectives, shape_bytes, tuple_elements

F32_4x8 = 4 * 8 * 4  # 128 bytes


CASES = [
    # sync forms: the shape is the result (a tuple: several results, all counted)
    ("%a = f32[4,8]{1,0} all-gather(f32[4,2]{1,0} %p), dimensions={1}",
     "all-gather", F32_4x8),
    ("%a = (f32[4,8]{1,0}, bf16[16]{0}) all-reduce(%p, %q), to_apply=%add",
     "all-reduce", F32_4x8 + 16 * 2),
    ("%a = f32[2,8]{1,0} reduce-scatter(f32[4,8]{1,0} %p), dimensions={0}, to_apply=%add",
     "reduce-scatter", 2 * 8 * 4),
    ("%a = f32[4,8]{1,0} all-to-all(f32[4,8]{1,0} %p), dimensions={1}",
     "all-to-all", F32_4x8),
    # all-gather-start: (operand, result)
    ("%ags = (f32[4,2]{1,0}, f32[4,8]{1,0}) all-gather-start(f32[4,2]{1,0} %p), dimensions={1}",
     "all-gather", F32_4x8),
    # combined all-gather-start: ((operands), (results))
    ("%ags = ((f32[4,2]{1,0}, f32[2]{0}), (f32[4,8]{1,0}, f32[8]{0})) "
     "all-gather-start(%p, %q), dimensions={1,0}",
     "all-gather", F32_4x8 + 8 * 4),
    # all-reduce-start: its shape is the result, one array or several
    ("%ars = f32[4,8]{1,0} all-reduce-start(f32[4,8]{1,0} %p), to_apply=%add",
     "all-reduce", F32_4x8),
    ("%ars = (f32[4,8]{1,0}, f32[3]{0}) all-reduce-start(%p, %q), to_apply=%add",
     "all-reduce", F32_4x8 + 3 * 4),
    # collective-permute-start: (operand, result, u32[] context, u32[] context)
    ("%cps = (f32[4,8]{1,0}, f32[4,8]{1,0}, u32[], u32[]) "
     "collective-permute-start(f32[4,8]{1,0} %p), source_target_pairs={{0,1},{1,0}}",
     "collective-permute", F32_4x8),
    # async wrappers printed with the wrapped op's name: ((operands), result, context)
    ("%a2a = ((f32[4,8]{1,0}), f32[4,8]{1,0}, s32[]) all-to-all-start(f32[4,8]{1,0} %p), "
     "dimensions={1}",
     "all-to-all", F32_4x8),
    ("%rss = ((f32[4,8]{1,0}), f32[2,8]{1,0}) reduce-scatter-start(f32[4,8]{1,0} %p), "
     "dimensions={0}, to_apply=%add",
     "reduce-scatter", 2 * 8 * 4),
    # memory-space layouts and /*index*/ comments in long tuples
    ("%cps = (f32[4,8]{1,0:S(1)}, f32[4,8]{1,0:S(1)}, u32[], u32[]) "
     "collective-permute-start(%p)",
     "collective-permute", F32_4x8),
    ("%ar = (f32[1], f32[1], f32[1], f32[1], f32[1], /*index=5*/f32[1]) all-reduce(%a), "
     "to_apply=%add",
     "all-reduce", 6 * 4),
]


@pytest.mark.parametrize("line, kind, expected", CASES)
def test_collective_bytes_for_each_form(line, kind, expected):
    (found,) = collectives("  " + line + ', metadata={op_type="Conv2D" op_name="model/conv"}')
    assert (found.kind, found.bytes, found.op_name) == (kind, expected, "model/conv")


def test_done_halves_and_other_ops_are_not_counted():
    text = "\n".join([
        "  %ags = (f32[4,2]{1,0}, f32[4,8]{1,0}) all-gather-start(%p), dimensions={1}",
        "  %agd = f32[4,8]{1,0} all-gather-done(%ags)",
        "  %cpd = f32[4,8]{1,0} collective-permute-done(%cps)",
        "  %ard = f32[4,8]{1,0} all-reduce-done(%ars)",
        "  %fusion = f32[4,8]{1,0} fusion(%p), kind=kLoop, calls=%fused",
        "  %add = f32[4]{0} add(%p, %q)",
    ])
    assert [(c.kind, c.name, c.bytes) for c in collectives(text)] == [
        ("all-gather", "ags", F32_4x8)]


def test_generic_async_start_takes_the_kind_of_the_computation_it_calls():
    text = "\n".join([
        "%async_a2a (param_0: f32[4,8]) -> f32[4,8] {",
        "  %param_0 = f32[4,8]{1,0} parameter(0)",
        "  ROOT %a2a = f32[4,8]{1,0} all-to-all(f32[4,8]{1,0} %param_0), dimensions={1}",
        "}",
        "%async_copy (param_0: f32[2]) -> f32[2] {",
        "  %param_0 = f32[2]{0} parameter(0)",
        "  ROOT %copy = f32[2]{0} copy(%param_0)",
        "}",
        "ENTRY %main (p: f32[4,8], q: f32[2]) -> f32[4,8] {",
        "  %p = f32[4,8]{1,0} parameter(0)",
        "  %q = f32[2]{0} parameter(1)",
        '  %s = ((f32[4,8]{1,0}), f32[4,8]{1,0}, s32[]) async-start(%p), calls=%async_a2a, '
        'metadata={op_name="swap"}',
        "  %c = ((f32[2]{0}), f32[2]{0}, s32[]) async-start(%q), calls=%async_copy",
        "  ROOT %d = f32[4,8]{1,0} async-done(%s)",
        "}",
    ])
    # counted once, at the async-start, not again inside the computation it runs
    assert [(c.kind, c.name, c.bytes, c.op_name) for c in collectives(text)] == [
        ("all-to-all", "s", F32_4x8, "swap"),
    ]


def test_tuple_elements_and_shape_bytes():
    assert tuple_elements("f32[4]") is None
    assert tuple_elements("((f32[8], s8[2]), f32[4,2], u32[])") == [
        "(f32[8], s8[2])", "f32[4,2]", "u32[]"]
    assert shape_bytes("(pred[8], bf16[2,2], s64[3], f32[])") == 8 + 8 + 24 + 4


def test_a_collective_without_metadata_is_named_after_its_operand():
    text = "\n".join([
        '%p = f32[2,8]{1,0} parameter(0)',
        '%m = f32[2,8]{1,0} multiply(%p, %p), metadata={op_type="Mul" op_name="sgd/mul"}',
        '%g = f32[4,8]{1,0} all-gather(%m), dimensions={0}',              # from its operand
        '%h = f32[4,8]{1,0} all-gather(%p), dimensions={0}',              # no named operand
        '%k = f32[4,8]{1,0} all-gather(%m), dimensions={0}, metadata={op_name="own/name"}',
    ])
    assert [(c.name, c.op_name) for c in collectives(text)] == [
        ("g", "sgd/mul"), ("h", ""), ("k", "own/name")]
