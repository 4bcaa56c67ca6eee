"""The temp buffers at a TPU program's peak, read from XLA's dump.

The hand-written dumps below follow the text XLA prints (``BufferAssignment::ToString``,
``HloLiveRange::ToString``, HLO text with metadata), as libtpu 0.0.42.1 writes them; the
real compile at the end checks the reading against the compiler's own temp figure.
"""
import os

import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.tpu import buffers
from spatial_tf.emulator.xla import compile_cache

from tpu_steps import needs_libtpu


ASSIGNMENT = """\
allocation 0: size 8192, parameter 0, shape |f32[2048]| at ShapeIndex {}:
 value: <1 p.1 @0> (size=8192,offset=0): f32[2048]{0:T(1024)}
allocation 1: size 4096, maybe-live-out:
 value: <2 out @0> (size=4096,offset=0): f32[1024]{0:T(1024)}
allocation 2: size 512, constant:
 value: <3 constant.7 @0> (size=512,offset=0): f32[]{:T(256)}
allocation 3: size 7168, preallocated-temp:
 value: <4 pad.2 @0> (size=3072,offset=0): f32[768]{0:T(1024)}
 value: <5 fusion.1{0} @0> (size=2048,offset=3072): f32[512]{0:T(1024)}
 value: <6 fusion.1{1} @0> (size=2048,offset=5120): f32[512]{0:T(1024)}
 value: <7 all-gather.3 @0> (size=4096,offset=0): f32[1024]{0:T(1024)}
allocation 4: size 1024, thread-local:
 value: <8 scratch @0> (size=1024,offset=0): f32[256]{0:T(1024)}
allocation 5: size 65536, color 1, preallocated-temp:
 value: <9 vmem.1 @1> (size=65536,offset=0): f32[16384]{0:T(1024)S(1)}
allocation 6: size 1024:
 value: <10 copy.5 @0> (size=1024,offset=0): f32[256]{0:T(1024)}
"""
LIVE_RANGE = """\
HloLiveRange (max 9):
  InstructionSequence:
    0:p.1
  BufferLiveRange:
    p.1{}:0-9
    out{}:8-9
    constant.7{}:0-9
    pad.2{}:1-4
    fusion.1{0}:3-5
    fusion.1{1}:3-7
    all-gather.3{}:5-8
    scratch{}:2-3
    vmem.1{}:0-9
"""
HLO = """\
HloModule step, is_scheduled=true

ENTRY %main (p.1: f32[2048]) -> f32[1024] {
  %p.1 = f32[2048]{0:T(1024)} parameter(0), metadata={op_name="x"}
  %pad.2 = f32[768]{0:T(1024)} pad(%p.1), metadata={op_type="Pad" op_name="model/conv/Pad"}
  %fusion.1 = (f32[512], f32[512]) fusion(%pad.2), kind=kOutput, metadata={op_type="Conv2D" op_name="model/conv/Conv2D" source_file="m.py"}
  %all-gather.3 = f32[1024]{0:T(1024)} all-gather(%fusion.1), dimensions={0}, metadata={op_name="model/resize/ResizeBilinear"}
  ROOT %out = f32[1024]{0:T(1024)} add(%all-gather.3, %copy.5)
}
"""


def _dump(folder, prefix, assignment=ASSIGNMENT, live=LIVE_RANGE, hlo=HLO):
    for suffix, text in ((".after_optimizations-buffer-assignment.txt", assignment),
                         (".after_optimizations-live-range.txt", live),
                         (".after_optimizations.txt", hlo)):
        (folder / (prefix + suffix)).write_text(text)


def test_temp_is_the_default_memorys_temp_allocations_only(tmp_path):
    _dump(tmp_path, "module_0001.step")
    # allocation 3 (preallocated temp) and 6 (a temp with no tag); not the parameter,
    # output, constant, thread-local or vmem (color 1) allocations
    assert buffers.peak(str(tmp_path)).temp == 7168 + 1024


def test_the_peak_is_where_the_most_bytes_are_live_and_lists_them(tmp_path):
    _dump(tmp_path, "module_0001.step")
    found = buffers.peak(str(tmp_path))
    # live bytes by position: 1-2: pad 3072 (+ copy.5 1024, live throughout: no range);
    # 3-4: pad + both fusion outputs 7168 (+1024); 5: fusions + gather 8192 (+1024);
    # 6-7: fusion.1{1} + gather 6144 (+1024); 8: gather 4096 (+1024)
    assert (found.at, found.peak) == (5, 8192 + 1024)
    assert [(b.name, b.size) for b in found.buffers] == [
        ("all-gather.3{}", 4096), ("fusion.1{0}", 2048), ("fusion.1{1}", 2048),
        ("copy.5{}", 1024)]
    gather = found.buffers[0]
    assert gather.op_name == "model/resize/ResizeBilinear"
    assert gather.shape == "f32[1024]{0:T(1024)}" and gather.live == (5, 8)
    assert found.buffers[3].live == (0, 9) and found.buffers[3].op_name == ""
    assert found.module == "module_0001.step"


def test_bytes_are_added_per_op_most_first(tmp_path):
    _dump(tmp_path, "module_0001.step")
    assert buffers.by_op(buffers.peak(str(tmp_path)).buffers) == [
        ("model/conv/Conv2D", 4096, 2), ("model/resize/ResizeBilinear", 4096, 1),
        ("", 1024, 1)]


def test_the_step_is_the_dumped_program_with_the_most_temp(tmp_path):
    small = "allocation 0: size 64, preallocated-temp:\n value: <1 t @0> (size=64,offset=0): f32[16]\n"
    _dump(tmp_path, "module_0000.jit_convert", assignment=small, live="  t{}:0-1\n", hlo="")
    _dump(tmp_path, "module_0001.step")
    # XLA:CPU's own dump of a helper program in the worker is not the TPU program's
    (tmp_path / "module_0002.helper.cpu_after_optimizations-buffer-assignment.txt"
     ).write_text(small.replace("64", "999999"))
    assert buffers.peak(str(tmp_path)).module == "module_0001.step"


def test_a_folder_without_a_dump_says_how_to_get_one(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: no TPU buffer assignment .*"
                                                f"Fix: set {buffers.DUMP_ENV}"):
        buffers.peak(str(tmp_path))


# ------------------------------------------------------------------ a real TPU compile


@needs_libtpu
def test_a_dumped_compile_reads_back_the_compilers_own_temp(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(buffers.DUMP_ENV, str(tmp_path / "dump"))
    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))

    def step(x):
        x = spatial_tf.split(x, [1, 4, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.relu(tf.nn.conv2d(x, kernel, 1, "SAME")) ** 2)
        kernel.assign_sub(0.01 * tape.gradient(loss, kernel))
        return loss

    x = tf.TensorSpec([2, 512, 512, 8], tf.float32)  # a spec: no 32 MiB tensor
    on_tpu = Emulator(4).lower(step, (x,)).compile("v5e")
    temp = {"4cores": on_tpu.memory()["temp"],
            "1cores": on_tpu.memory(partitioned=False)["temp"]}  # compiles the one-core
    folders = sorted(os.listdir(tmp_path / "dump"))
    assert [f.rsplit("-", 1)[0] for f in folders] == ["step-1cores", "step-4cores"]
    by_cores = {f.split("-")[1]: str(tmp_path / "dump" / f) for f in folders}
    # libtpu's temp figure is not its dump's temp allocation to the byte (124 KiB more
    # for the one-core program, 144.5 KiB less for the split one: 0, all in VMEM)
    one, split = buffers.peak(by_cores["1cores"]), buffers.peak(by_cores["4cores"])
    assert temp["1cores"] > 300 * 2**20
    for found, cores in ((one, "1cores"), (split, "4cores")):
        assert abs(found.temp - temp[cores]) <= 256 * 2**10
        assert 0 < found.peak <= found.temp
    # the one-core program's peak holds the 16 MiB image laid out for the convolution
    # and the convolution's output, each padded to the TPU's tiles (8 channels to 128)
    assert one.peak > 0.9 * one.temp
    assert {b.op_name for b in one.buffers if b.size > 100 * 2**20} == {"Conv2D", "XLA_Args"}
    # with the dump asked for, the compiler runs again: the cached answer is not read
    Emulator(4).lower(step, (x,)).compile("v5e")
    assert sorted(f.rsplit("-", 1)[0] for f in os.listdir(tmp_path / "dump")) == [
        "step-1cores", "step-4cores", "step-4cores"]
