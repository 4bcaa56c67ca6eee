"""TensorFlow's and XLA's own log lines stay off the terminal unless SPATIAL_TF_VERBOSE=1."""
import os
import subprocess
import sys

import pytest

from spatial_tf import logs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What a user saw before: TensorFlow start-up, TF's XLA service, jaxlib's GSPMD notice,
# TF's "Compiled cluster" line, tf.data's lines when a dataset's iterator starts.
NOISE = ("cpu_feature_guard", "XLA service", "GSPMD sharding propagation",
         "Compiled cluster using XLA", "absl::InitializeLog")
TF_DATA_NOISE = ("generator_dataset_op.cc", "Memory patch applied",
                 "Input of GeneratorDatasetOp::Dataset will not be optimized")

SCRIPT = """
import sys
import spatial_tf
strategy = spatial_tf.Emulator(num_cores_per_replica=2)   # imports TensorFlow and jax
import tensorflow as tf
w = tf.Variable(tf.ones([3, 3, 1, 1]))   # the user's own first TensorFlow op
def step_fn(x):
    x = spatial_tf.split(x, [1, 2, 1, 1])
    return tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME"))
x = tf.ones([1, 8, 8, 1])
print("--- spatial_tf calls", file=sys.stderr, flush=True)
print(strategy.compare(step_fn, args=(x,), reference="tensorflow").ok)
print(strategy.compare(step_fn, args=(x,)).ok)
print(strategy.report(step_fn, args=(x,)).function)
print(float(strategy.run(step_fn, args=(x,))))
print(float(tf.function(lambda x: strategy.run(step_fn, args=(x,)))(x)))
# a generator dataset of the user's own, then one the emulator distributes
ds = tf.data.Dataset.from_generator(lambda: iter([[1.0, 2.0]] * 4),
                                    output_signature=tf.TensorSpec([2], tf.float32))
print(sum(float(tf.reduce_sum(b)) for b in ds.batch(2)))
print(float(tf.reduce_sum(next(iter(strategy.experimental_distribute_dataset(ds.batch(2)))))))
"""


def run_script(**env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TF_CPP_MIN_LOG_LEVEL", logs.VERBOSE_ENV)}
    environ.update(PYTHONPATH=REPO, **env)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=environ, capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def test_spatial_tf_calls_print_no_tensorflow_or_xla_log_lines():
    result = run_script()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "step_fn", "484.0", "484.0", "12.0",
                                     "6.0"]
    before, after = result.stderr.split("--- spatial_tf calls\n")
    assert after == ""
    # importing TensorFlow and jax through spatial_tf printed nothing either; what the
    # user's own first op may print (a CUDA build's start-up lines) is left alone
    assert not any(n in before for n in NOISE if n != "absl::InitializeLog"), before


def test_verbose_switch_shows_them():
    # the compile cache off: XLA's lines come from a compile, which a cached program skips
    result = run_script(SPATIAL_TF_VERBOSE="1", SPATIAL_TF_COMPILE_CACHE="off")
    assert result.returncode == 0, result.stderr
    assert "GSPMD sharding propagation is going to be deprecated" in result.stderr
    assert "Compiled cluster using XLA" in result.stderr
    # the tf.data lines test_spatial_tf_calls_print_no_tensorflow_or_xla_log_lines and
    # test_tensorflow_imported_first_prints_only_its_start_up_lines find absent
    after = result.stderr.split("--- spatial_tf calls\n")[1]
    assert all(n in after for n in TF_DATA_NOISE), after


# The user's own TensorFlow first: its start-up lines print before spatial_tf can act
# (docs/troubleshooting.md says so); what spatial_tf's calls start stays quiet
TF_FIRST = """
import sys
import tensorflow as tf
import spatial_tf
print("--- spatial_tf calls", file=sys.stderr, flush=True)
strategy = spatial_tf.Emulator(num_cores_per_replica=2)
ds = tf.data.Dataset.from_tensor_slices(tf.ones([4, 8, 8, 1])).batch(2)
print(float(tf.reduce_sum(next(iter(strategy.experimental_distribute_dataset(ds))))))
"""


def test_tensorflow_imported_first_prints_only_its_start_up_lines():
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TF_CPP_MIN_LOG_LEVEL", logs.VERBOSE_ENV)}
    result = subprocess.run([sys.executable, "-c", TF_FIRST], capture_output=True, text=True,
                            env={**environ, "PYTHONPATH": REPO}, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "128.0\n"
    after = result.stderr.split("--- spatial_tf calls\n")[1]
    assert not any(n in after for n in TF_DATA_NOISE + NOISE), after


def test_quiet_keeps_what_is_not_log_noise(capfd):
    with logs.quiet():
        os.write(2, b"I0000 00:00:1795426508.384303    6367 device_compiler.h:208] "
                    b"Compiled cluster using XLA!\n")
        os.write(2, b"W1123 09:34:34.858641    5551 sharding_propagation.cc:3132] GSPMD\n")
        os.write(2, b"E1123 09:34:34.858641    5551 compiler.cc:1] a real error\n")
        print("a Python warning", file=sys.stderr)
    assert sorted(capfd.readouterr().err.splitlines()) == [
        "E1123 09:34:34.858641    5551 compiler.cc:1] a real error", "a Python warning"]


def test_quiet_is_reentrant_and_restores_stderr(capfd):
    with logs.quiet():
        with logs.quiet():
            os.write(2, b"I1123 09:34:34.858641 1 a.cc:1] inner\n")
        os.write(2, b"kept\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "kept\nafter\n"


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("ON", True),
                                             ("0", False), ("", False), ("no", False)])
def test_verbose_values(monkeypatch, value, expected):
    monkeypatch.setenv(logs.VERBOSE_ENV, value)
    assert logs.verbose() is expected


def test_verbose_passes_everything_through(monkeypatch, capfd):
    monkeypatch.setenv(logs.VERBOSE_ENV, "1")
    with logs.quiet():
        os.write(2, b"I1123 09:34:34.858641 1 a.cc:1] shown\n")
    assert capfd.readouterr().err == "I1123 09:34:34.858641 1 a.cc:1] shown\n"


ALARM = (b"E1127 09:34:34.858641    5551 slow_operation_alarm.cc:73] Constant folding an "
         b"instruction is taking > 1s:\n\n  %reduce.5 = f32[] reduce(f32[1048576]{0} %x), "
         b"dimensions={0}\n\nThis isn't necessarily a bug; constant-folding is inherently a "
         b"trade-off between compilation time and speed at runtime.\n\nIf you'd like to file "
         b"a bug, run with envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.\n")


def test_xla_slow_constant_folding_alarms_are_dropped_whole(capfd, monkeypatch):
    monkeypatch.delenv(logs.VERBOSE_ENV, raising=False)
    with logs.quiet():
        os.write(2, ALARM + b"ValueError: a line the user must see\n" + ALARM)
    assert capfd.readouterr().err == "ValueError: a line the user must see\n"


def test_verbose_shows_the_alarm(capfd, monkeypatch):
    monkeypatch.setenv(logs.VERBOSE_ENV, "1")
    with logs.quiet():
        os.write(2, ALARM)
    assert capfd.readouterr().err == ALARM.decode()


# A script of the user's own: spatial_tf imported first, then TensorFlow, then an op
USER_SCRIPT = "import spatial_tf, tensorflow as tf; tf.constant(1)"
TF_ALONE = "import tensorflow as tf; tf.constant(1)"


def run_python(code, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TF_CPP_MIN_LOG_LEVEL", logs.VERBOSE_ENV)}
    environ.update(PYTHONPATH=REPO, **env)
    result = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                            text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return result


def start_up_lines(stderr):
    """TensorFlow's start-up log lines, as ``file.cc`` names (time stamps differ by run)."""
    import re

    return sorted(re.findall(r"^[IW]\d{4} [\d:. ]+ +\d+ ([\w./-]+):\d+\] ", stderr, re.M))


@pytest.fixture(scope="module")
def baseline():
    """TensorFlow's start-up lines when it is imported alone (one process for the module)."""
    return start_up_lines(run_python(TF_ALONE).stderr)


def test_tensorflow_imported_after_spatial_tf_starts_quietly(baseline):
    if not baseline:
        pytest.skip("this TensorFlow build prints no start-up lines")
    assert run_python(USER_SCRIPT).stderr == ""


@pytest.mark.parametrize("env", [{logs.VERBOSE_ENV: "1"}, {"TF_CPP_MIN_LOG_LEVEL": "0"}],
                         ids=["SPATIAL_TF_VERBOSE=1", "TF_CPP_MIN_LOG_LEVEL=0"])
def test_the_users_switch_brings_the_start_up_lines_back(baseline, env):
    assert start_up_lines(run_python(USER_SCRIPT, **env).stderr) == baseline


@pytest.mark.parametrize("env, expected", [({}, "2"), ({"TF_CPP_MIN_LOG_LEVEL": "1"}, "1"),
                                           ({logs.VERBOSE_ENV: "1"}, "None")])
def test_import_sets_tensorflows_log_level_only_when_the_user_has_not(env, expected):
    code = ("import os, sys, spatial_tf; "
            "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'), 'tensorflow' in sys.modules)")
    assert run_python(code, **env).stdout == f"{expected} False\n"
