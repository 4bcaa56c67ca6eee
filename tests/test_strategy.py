"""tpu_strategy() and auto(): everything after the TPU connection runs for real here.

Only ``spatial_tf.strategy._connect`` (resolve, connect, initialize: needs a TPU) is
replaced, by a resolver that reports a synthetic slice's devices. TPUStrategy itself,
the DeviceAssignment and the SPMD flag are TensorFlow's own code.
"""
import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import tensorflow as tf
from tensorflow.python.client import session as session_lib
from tensorflow.python.tpu import tpu_system_metadata

import spatial_tf
from spatial_tf import strategy as strategy_lib
from spatial_tf.strategy import TPUUnavailableError, auto, tpu_strategy
from spatial_tf.topology import device_assignment, synthetic
from spatial_tf.topology.hosts import host_feeds
from spatial_tf.topology.placement import describe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeResolver:
    """Reports the TPU devices of a synthetic slice, as a connected resolver would."""

    def __init__(self, topology):
        self.topology = topology

    def get_tpu_system_metadata(self):
        t = self.topology
        devices = []
        for task in range(t.num_tasks):
            prefix = f"/job:worker/replica:0/task:{task}/device"
            devices.append(session_lib._DeviceAttributes(f"{prefix}:CPU:0", "CPU", 0, 0))
            for ordinal in range(t.num_tpus_per_task):
                devices.append(
                    session_lib._DeviceAttributes(f"{prefix}:TPU:{ordinal}", "TPU", 0, 0)
                )
        return tpu_system_metadata.TPUSystemMetadata(
            t.num_tasks * t.num_tpus_per_task, t.num_tasks, t.num_tpus_per_task, t, devices
        )


def real_tpu_strategy(name="v3-8", num_cores_per_replica=4):
    """TensorFlow's own SPMD TPUStrategy over a synthetic slice's devices (no TPU needed;
    its scope can be entered, nothing run on it)."""
    topology = synthetic(name)
    return tf.distribute.TPUStrategy(
        FakeResolver(topology),
        experimental_device_assignment=device_assignment(
            topology, num_cores_per_replica=num_cores_per_replica),
        experimental_spmd_xla_partitioning=True)


@pytest.fixture
def fake_tpu(monkeypatch):
    """Make ``_connect`` return a resolver and topology for the named slice."""
    calls = []

    def install(name):
        topology = synthetic(name)

        def fake_connect(tpu, timeout_s):
            calls.append((tpu, timeout_s))
            return FakeResolver(topology), topology

        monkeypatch.setattr(strategy_lib, "_connect", fake_connect)
        return calls

    return install


@pytest.fixture
def no_tpu_here(monkeypatch):
    for name in ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG", "COLAB_TPU_ADDR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(strategy_lib, "_LOCAL_TPU_DEVICES", ("/nonexistent/accel*",))


# ---------------------------------------------------------------- tpu_strategy


@pytest.mark.parametrize(
    "name, n", [("v3-8", 4), ("v3-32", 8), ("v3-32", 16), ("v4-32", 4), ("v6e-16", 8)]
)
def test_tpu_strategy_builds_a_real_spmd_tpu_strategy(fake_tpu, name, n):
    calls = fake_tpu(name)
    strategy = tpu_strategy("my-tpu", num_cores_per_replica=n, timeout_s=7)
    expected = device_assignment(synthetic(name), num_cores_per_replica=n)

    assert calls == [("my-tpu", 7)]
    assert isinstance(strategy, tf.distribute.TPUStrategy)
    assert strategy.extended._use_spmd_for_xla_partitioning
    assert strategy.num_replicas_in_sync == expected.num_replicas
    devices = strategy.extended._tpu_devices
    assert devices.shape == (expected.num_replicas, n)
    for replica in range(expected.num_replicas):
        for core in range(n):
            task, ordinal = devices[replica, core].rsplit("/task:", 1)[1].split("/device:TPU:")
            coords = expected.coordinates(replica, core)
            assert int(task) == synthetic(name).task_ordinal_at_coordinates(coords)
            assert int(ordinal) == expected.tpu_ordinal(replica, core)


@pytest.mark.parametrize("name, n", [("v3-32", 1), ("v3-32", 8), ("v3-32", 16), ("v4-32", 8)])
def test_host_feeds_match_the_input_workers_tpu_strategy_uses(fake_tpu, name, n):
    fake_tpu(name)
    strategy = tpu_strategy(num_cores_per_replica=n)
    workers = strategy.extended._device_input_worker_devices
    feeds = host_feeds(strategy.extended._device_assignment)
    assert [f.host_device for f in feeds] == list(workers)
    assert [len(f.replicas) for f in feeds] == [len(v) for v in workers.values()]


def _sharding_ops(fn, spec):
    graph = tf.function(fn).get_concrete_function(spec).graph
    return [op for op in graph.get_operations() if op.type == "XlaSharding"]


def test_strategy_splits_to_its_logical_devices(fake_tpu):
    fake_tpu("v3-8")
    strategy = tpu_strategy(num_cores_per_replica=8)
    image = tf.TensorSpec([1, 8, 8, 1])
    # TensorFlow's own check of dims against the strategy's logical devices passes...
    ops = _sharding_ops(lambda x: strategy.experimental_split_to_logical_devices(
        x, [1, 2, 4, 1]), image)
    assert len(ops) == 1
    with pytest.raises(ValueError, match="8"):
        _sharding_ops(lambda x: strategy.experimental_split_to_logical_devices(
            x, [1, 2, 2, 1]), image)
    # ...and spatial_tf.split resolves 8 cores from this strategy.
    ops = _sharding_ops(
        lambda x: spatial_tf.split({"image": x}, {"image": [1, 2, 4, 1]}, strategy), image
    )
    assert len(ops) == 1


def test_describe_accepts_the_strategy(fake_tpu):
    fake_tpu("v3-32")
    strategy = tpu_strategy(num_cores_per_replica=8)
    assert describe(strategy) == describe(strategy.extended._device_assignment)
    assert describe(strategy).startswith("4 replicas x 8 logical cores on v3-32")


def test_computation_shape_and_replicas_are_passed_through(fake_tpu):
    fake_tpu("v3-32")
    strategy = tpu_strategy(computation_shape=[4, 1, 1, 2], num_replicas=2)
    da = strategy.extended._device_assignment
    assert strategy.num_replicas_in_sync == 2
    assert {tuple(c[:3]) for c in da.core_assignment[0]} == {(x, 0, 0) for x in range(4)}


def test_bad_request_is_rejected_before_connecting(fake_tpu):
    calls = fake_tpu("v3-8")
    with pytest.raises(ValueError, match=r"^tpu_strategy: got neither of computation_shape="):
        tpu_strategy()
    assert calls == []


def test_request_that_does_not_fit_the_slice_names_it(fake_tpu):
    fake_tpu("v3-8")
    with pytest.raises(ValueError, match=r"^v3-8 has 8 cores; num_cores_per_replica=16"):
        tpu_strategy(num_cores_per_replica=16)


# ---------------------------------------------------------------- finding and reaching a TPU


def test_no_tpu_anywhere_fails_at_once(no_tpu_here, monkeypatch):
    def must_not_run(target):
        raise AssertionError("the resolver must not be tried")

    monkeypatch.setattr(strategy_lib, "_resolver", must_not_run)
    with pytest.raises(TPUUnavailableError, match=r"^No TPU found: tpu= was not given") as e:
        tpu_strategy(num_cores_per_replica=8)
    assert e.value.can_fall_back and not e.value.runtime_changed


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"TPU_NAME": "my-tpu"}, None),
        ({"COLAB_TPU_ADDR": "10.0.0.2:8470"}, "grpc://10.0.0.2:8470"),
    ],
)
def test_target_from_the_environment(no_tpu_here, monkeypatch, env, expected):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert strategy_lib._resolve_target(None) == expected


def test_tpu_vm_is_found_by_its_device_files(no_tpu_here, monkeypatch, tmp_path):
    (tmp_path / "accel0").touch()
    monkeypatch.setattr(strategy_lib, "_LOCAL_TPU_DEVICES", (str(tmp_path / "accel*"),))
    assert strategy_lib._resolve_target("") == "local"


def test_explicit_target_is_used_as_given():
    assert strategy_lib._resolve_target("local") == "local"
    with pytest.raises(TypeError, match=r"tpu is 3 \(int\); expected a TPU name"):
        strategy_lib._resolve_target(3)


def test_local_tpu_missing_gives_a_clear_error_without_touching_the_runtime():
    # Real TensorFlow on this CPU machine: 'local' has no TPU system to initialize.
    with pytest.raises(
        TPUUnavailableError, match=r"^Could not use TPU 'local': NotFoundError"
    ) as e:
        strategy_lib._connect("local", timeout_s=20)
    assert not e.value.runtime_changed
    assert float(tf.reduce_sum(tf.ones([3]))) == 3.0  # TensorFlow still works here


@pytest.mark.slow
def test_unreachable_tpu_fails_within_the_timeout():
    # A server that accepts the connection and never answers: a real gRPC hang.
    # Connecting rewires the process's TensorFlow runtime, so this runs in a subprocess.
    script = textwrap.dedent(
        """
        import socket, threading, time
        from spatial_tf.strategy import _connect, auto, TPUUnavailableError
        server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(8)
        held = []
        threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
        target = "grpc://127.0.0.1:%d" % server.getsockname()[1]
        start = time.monotonic()
        try:
            _connect(target, timeout_s=3)
        except TPUUnavailableError as e:
            print("ELAPSED", round(time.monotonic() - start, 1))
            print("CHANGED", e.runtime_changed)
            print("MESSAGE", e)
        try:
            auto(target, num_cores_per_replica=1, timeout_s=1)
        except TPUUnavailableError as e:
            print("AUTO", e)
        """
    )
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    lines = dict(
        line.split(" ", 1) for line in result.stdout.splitlines()
        if line.split(" ", 1)[0] in ("ELAPSED", "CHANGED", "MESSAGE", "AUTO")
    )
    assert float(lines["ELAPSED"]) >= 3.0, result.stdout + result.stderr  # waited it out
    assert lines["CHANGED"] == "True"
    assert lines["MESSAGE"].startswith("No answer from TPU 'grpc://127.0.0.1:")
    assert "within 3 s" in lines["MESSAGE"]
    assert "auto() cannot fall back to CPU" in lines["AUTO"]
    assert "restart the process" in lines["AUTO"]
    assert result.returncode == 0, result.stderr  # the stuck attempt does not block exit


# ---------------------------------------------------------------- auto


def test_auto_on_a_tpu_returns_the_tpu_strategy(fake_tpu, caplog):
    fake_tpu("v3-8")
    with caplog.at_level(logging.INFO, logger="spatial_tf"):
        strategy = auto(num_cores_per_replica=4)
    assert isinstance(strategy, tf.distribute.TPUStrategy)
    assert strategy.num_replicas_in_sync == 2
    assert "auto: using the TPU." in caplog.text


def test_auto_does_not_hide_an_impossible_request(fake_tpu):
    fake_tpu("v3-8")
    with pytest.raises(ValueError, match=r"^v3-8 has 8 cores; num_cores_per_replica=16"):
        auto(num_cores_per_replica=16)


def test_auto_without_tpu_or_jax_warns_and_uses_the_default_strategy(no_tpu_here, monkeypatch):
    from spatial_tf.emulator.xla import _xla

    monkeypatch.setattr(_xla, "_jax", None)  # forget the loaded jax ...
    monkeypatch.setitem(sys.modules, "jax", None)  # ... and make it unimportable
    with pytest.warns(RuntimeWarning, match=r"no TPU and no CPU emulator \(ImportError: "
                      r"spatial_tf.emulator needs jax .*runs unpartitioned on one device.*"
                      r"No TPU because: No TPU found"):
        strategy = auto(num_cores_per_replica=8)
    assert strategy is tf.distribute.get_strategy()


@pytest.mark.emulator
def test_auto_without_tpu_uses_the_emulator(no_tpu_here, caplog):
    from spatial_tf.emulator import Emulator

    with caplog.at_level(logging.INFO, logger="spatial_tf"):
        strategy = auto(computation_shape=[2, 2, 1, 2], num_replicas=2,
                        computation_stride=[1, 1, 1, 1])
    assert isinstance(strategy, Emulator)
    assert (strategy.num_cores_per_replica, strategy.num_replicas) == (8, 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # one short line by default; the reason and the fixes at INFO and in docs/tpu.md
    assert warnings[-1] == ("spatial_tf.auto: no TPU here, using Emulator(num_cores_per_replica"
                            "=8, num_replicas=2) on CPU; see docs/tpu.md")
    assert all(len(w) < 120 and "\n" not in w for w in warnings)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("spatial_tf.auto: no TPU because: no TPU found (TPU_NAME") and
               "pass tpu='NAME'" in m for m in info), info
    assert "use spatial_tf.auto(...) to fall back" not in caplog.text  # not said to auto's caller
    assert "computation_stride has no meaning on the CPU emulator; ignored" in caplog.text


@pytest.mark.emulator
def test_auto_with_reason_returns_the_emulator_and_why_without_the_notice(no_tpu_here, caplog):
    from spatial_tf.emulator import Emulator
    from spatial_tf.strategy import auto_with_reason

    with caplog.at_level(logging.INFO, logger="spatial_tf"):
        strategy, no_tpu = auto_with_reason(num_cores_per_replica=4, num_replicas=2)
    assert isinstance(strategy, Emulator)
    assert (strategy.num_cores_per_replica, strategy.num_replicas) == (4, 2)
    assert isinstance(no_tpu, TPUUnavailableError)
    assert no_tpu.reason == ("no TPU found (TPU_NAME and COLAB_TPU_ADDR are not set, no "
                             "/dev/accel* or /dev/vfio/N devices)")
    assert str(no_tpu).startswith("No TPU found: tpu= was not given")
    assert caplog.text == ""  # the caller says it in its own words


def test_an_unavailable_tpus_reason_is_its_message_without_the_fix():
    error = TPUUnavailableError("Could not use TPU 'x': NotFoundError: gone. Fix: check it.")
    assert error.reason == "Could not use TPU 'x': NotFoundError: gone"


@pytest.mark.emulator
def test_auto_falls_back_when_a_local_tpu_fails_to_initialize(caplog):
    from spatial_tf.emulator import Emulator

    with caplog.at_level(logging.INFO, logger="spatial_tf"):
        strategy = auto("local", num_cores_per_replica=2)
    assert isinstance(strategy, Emulator) and strategy.num_cores_per_replica == 2
    assert "Could not use TPU 'local': NotFoundError" in caplog.text


def test_auto_checks_the_shape_even_without_a_tpu(no_tpu_here):
    with pytest.raises(ValueError, match=r"^auto: computation_shape=\[2, 2, 2\] must have 4 "
                       r"positive entries .*TPUEstimator's 3-entry form"):
        auto(computation_shape=[2, 2, 2])


@pytest.mark.parametrize(
    "timeout_s, error", [(0, ValueError), (-1, ValueError), ("30", TypeError), (True, TypeError)]
)
def test_timeout_must_be_a_positive_number(timeout_s, error):
    with pytest.raises(error, match=r"timeout_s=.*; expected a positive number of seconds"):
        strategy_lib._connect("local", timeout_s)


# ---------------------------------------------------------------- what auto() falls back on


class StubResolver:
    """The resolver's one method _connect calls before the runtime is touched."""

    def __init__(self, master):
        self._master = master

    def master(self):
        return self._master


@pytest.fixture
def tpu_runtime(monkeypatch):
    """Fake TensorFlow's TPU steps; ``fail(stage, error, master)`` makes ``stage`` raise."""
    connected = []

    def install(stage, error, master=""):
        def resolve(target):
            if stage == "resolve":
                raise error
            return StubResolver(master)

        def connect(resolver):
            connected.append(resolver.master())
            if stage == "connect":
                raise error

        def initialize(resolver):
            if stage == "initialize":
                raise error
            raise AssertionError("every case here fails before returning a topology")

        monkeypatch.setattr(strategy_lib, "_resolver", resolve)
        monkeypatch.setattr(strategy_lib, "_connect_runtime", connect)
        monkeypatch.setattr(strategy_lib, "_initialize", initialize)
        return connected

    return install


NO_TPU_CASES = [
    ("initialize", tf.errors.NotFoundError(None, None, "No TPU devices found")),
    ("initialize", tf.errors.UnavailableError(None, None, "Socket closed")),
    ("initialize", tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded")),
    ("resolve", ValueError("No TPUs with the specified names exist.")),
]


@pytest.mark.emulator
@pytest.mark.parametrize("stage, error", NO_TPU_CASES)
def test_auto_falls_back_only_when_there_is_no_tpu(tpu_runtime, caplog, stage, error):
    from spatial_tf.emulator import Emulator

    tpu_runtime(stage, error)
    with caplog.at_level(logging.INFO, logger="spatial_tf"):
        strategy = auto("local", num_cores_per_replica=2)
    assert isinstance(strategy, Emulator)
    assert f"Could not use TPU 'local': {type(error).__name__}" in caplog.text


FAULT_CASES = [
    ("resolve", RuntimeError('TPU "my-tpu" is not yet ready; state: "CREATING"')),
    ("initialize", tf.errors.ResourceExhaustedError(None, None, "TPU in use by another process")),
    ("initialize", tf.errors.FailedPreconditionError(None, None, "TPU version mismatch")),
    ("connect", TypeError("a bug: unexpected argument")),
]


@pytest.mark.parametrize("stage, error", FAULT_CASES)
def test_a_tpu_fault_propagates_with_its_cause(tpu_runtime, stage, error):
    tpu_runtime(stage, error)
    with pytest.raises(spatial_tf.TPUError) as e:
        auto("my-tpu", num_cores_per_replica=2)
    first_line = str(error).splitlines()[0]
    assert str(e.value).startswith(
        f"TPU 'my-tpu' was found but failed to {stage}: {type(error).__name__}: {first_line}. "
        f"This is a fault of the TPU or its software, not a missing TPU, so spatial_tf does "
        f"not fall back to CPU.")
    assert e.value.__cause__ is error


def test_no_tpu_error_after_connecting_the_runtime_refuses_to_fall_back(tpu_runtime):
    connected = tpu_runtime(
        "initialize", tf.errors.UnavailableError(None, None, "Socket closed"),
        master="grpc://10.0.0.2:8470")
    with pytest.raises(TPUUnavailableError) as e:
        auto("my-tpu", num_cores_per_replica=2)
    assert connected == ["grpc://10.0.0.2:8470"]
    assert e.value.runtime_changed and not e.value.can_fall_back
    assert "failed after this process connected to it (initialize)" in str(e.value)
    assert "auto() cannot fall back to CPU" in str(e.value)


def test_after_a_timeout_auto_refuses_to_fall_back_and_says_why(monkeypatch):
    release = threading.Event()
    started = threading.Event()

    def hanging_resolver(target):  # a TPU that never answers, before any runtime change
        started.set()
        release.wait(30)
        raise tf.errors.UnavailableError(None, None, "gave up")

    monkeypatch.setattr(strategy_lib, "_resolver", hanging_resolver)
    try:
        with pytest.raises(TPUUnavailableError) as e:
            auto("my-tpu", num_cores_per_replica=2, timeout_s=0.2)
    finally:
        release.set()
    assert started.is_set()
    assert not e.value.runtime_changed and not e.value.can_fall_back
    text = str(e.value)
    assert text.startswith("No answer from TPU 'my-tpu' within 0.2 s")
    assert "That attempt may still connect this process's TensorFlow to the TPU at any " \
           "moment, after which work would go there, so auto() cannot fall back to CPU " \
           "safely. Fix: pass a larger timeout_s=" in text


def test_tpu_strategy_records_its_layout_instead_of_reading_it_back(fake_tpu, monkeypatch):
    from spatial_tf import _tf_internals

    fake_tpu("v3-8")
    strategy = tpu_strategy(num_cores_per_replica=4)

    def no_private_reads(strategy, name):
        raise AssertionError(f"read {name} back from a strategy tpu_strategy built")

    monkeypatch.setattr(_tf_internals, "tpu_attribute", no_private_reads)
    layout = _tf_internals.tpu_layout(strategy)
    assert (layout.num_cores_per_replica, layout.spmd) == (4, True)
    assert describe(strategy).startswith("2 replicas x 4 logical cores on v3-8")
    graph = tf.function(lambda x: spatial_tf.split(x, [1, 2, 2, 1], strategy)).get_concrete_function(
        tf.TensorSpec([1, 8, 8, 1])).graph
    assert [op.type for op in graph.get_operations()].count("XlaSharding") == 1


def test_a_fault_after_connecting_says_the_process_must_restart(tpu_runtime):
    tpu_runtime("initialize", tf.errors.InternalError(None, None, "TPU driver crashed"),
                master="grpc://10.0.0.2:8470")
    with pytest.raises(spatial_tf.TPUError, match=r"failed to initialize: InternalError: TPU "
                       r"driver crashed\..*This process's TensorFlow is now connected to that "
                       r"cluster: restart it to run locally\.$"):
        auto("my-tpu", num_cores_per_replica=2)
