"""Program: which XLA failures are reported as compile errors, and which pass as they are."""
import pytest
import tensorflow as tf

from spatial_tf.annotate import annotate_tensor
from spatial_tf.emulator.xla import _xla
from spatial_tf.emulator.xla.errors import CompileError
from spatial_tf.emulator.xla.executable import Program, compile_error
from spatial_tf.emulator.compile.trace import trace
from spatial_tf.spec import Tile


@tf.autograph.experimental.do_not_convert
def _four_way(x):
    return tf.reduce_sum(annotate_tensor(x, Tile(1, 4), 4) * 2.0)


@pytest.fixture(scope="module")
def traced_for_four_cores(emulators):
    emulators(4)  # jax started with enough devices
    return trace(_four_way, (tf.ones([4, 8]),), {})


def test_a_program_xla_rejects_is_a_compile_error_that_points_at_the_sharding(traced_for_four_cores):
    # a 4-way tiling compiled for 2 cores: XLA's verifier rejects the sharding
    with pytest.raises(CompileError) as e:
        Program(traced_for_four_cores, num_partitions=2)
    text = str(e.value)
    assert text.startswith("_four_way: XLA could not compile the step for 2 cores: "
                           "INVALID_ARGUMENT:")
    assert "device 2 >= num_devices (2)" in text
    assert text.endswith("Fix: check the sharding annotations (spatial_tf.split specs) against "
                         "the tensors they annotate; the full XLA message is chained below.")
    assert isinstance(e.value.__cause__, RuntimeError)


def test_too_few_devices_is_not_blamed_on_the_sharding(traced_for_four_cores):
    with pytest.raises(RuntimeError, match=r"needs 4096 virtual CPU devices") as e:
        Program(traced_for_four_cores, num_partitions=4096)
    assert not isinstance(e.value, CompileError)


def test_an_internal_xla_failure_passes_with_its_own_text(traced_for_four_cores, monkeypatch):
    jax = pytest.importorskip("jax")
    failure = jax.errors.JaxRuntimeError("INTERNAL: Failed to allocate 17179869184 bytes")

    def failing_compile(*args, **kwargs):
        raise failure

    monkeypatch.setattr(_xla, "compile_module", failing_compile)
    with pytest.raises(RuntimeError) as e:
        Program(traced_for_four_cores, num_partitions=4)
    assert e.value is failure
    assert "sharding" not in str(e.value)


@pytest.mark.parametrize("status", ["INTERNAL", "RESOURCE_EXHAUSTED", "UNKNOWN", "ABORTED"])
def test_failures_of_xla_or_the_machine_are_not_compile_errors(status):
    assert compile_error("step", 2, RuntimeError(f"{status}: something broke")) is None


@pytest.mark.parametrize("status", ["INVALID_ARGUMENT", "UNIMPLEMENTED", "FAILED_PRECONDITION"])
def test_rejections_without_a_sharding_do_not_blame_it(status):
    error = compile_error("step", 8, RuntimeError(f"{status}: Unsupported op Foo\nmore"))
    assert str(error) == (
        f"step: XLA could not compile the step for 8 cores: {status}: Unsupported op Foo. "
        f"Fix: the full XLA message is chained below; its metadata op_name names the "
        f"TensorFlow op of the instruction XLA rejected.")
