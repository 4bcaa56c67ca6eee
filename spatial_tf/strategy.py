"""Get a spatially partitioned ``TPUStrategy`` from a TPU, or a local stand-in without one.

``tpu_strategy`` connects to the TPU, reads its topology, chooses a computation shape
(``spatial_tf.topology.choose``) and returns ``tf.distribute.TPUStrategy`` with that
``DeviceAssignment`` and ``experimental_spmd_xla_partitioning=True``. ``auto`` does the
same on a TPU and otherwise returns the CPU emulator (or, without it, the default
strategy), so one script runs anywhere.

Everything that needs a real TPU is in ``_connect``; the rest runs (and is tested) on CPU.

>>> import spatial_tf
>>> strategy = spatial_tf.auto(num_cores_per_replica=1)   # doctest: +SKIP
"""
import glob
import importlib
import logging
import math
import os
import threading
import time
import warnings
from typing import Optional, Sequence, Tuple

import tensorflow as tf

from spatial_tf._tf_internals import TPULayout, record_tpu_layout
from spatial_tf.context import EmulatedLayout
from spatial_tf.error import Error
from spatial_tf.table import plural
from spatial_tf.topology import check_exactly_one, check_vector, choose, slice_label

__all__ = [
    "tpu_strategy",
    "auto",
    "auto_with_reason",
    "TPUUnavailableError",
    "TPUError",
    "DEFAULT_TIMEOUT_S",
]

log = logging.getLogger("spatial_tf")

DEFAULT_TIMEOUT_S = 30.0
_TPU_ENV = ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG")
_LOCAL_TPU_DEVICES = ("/dev/accel*", "/dev/vfio/[0-9]*")  # v2-v4 / v5e and later TPU VMs


class TPUUnavailableError(Error, RuntimeError):
    """No TPU here: none was found, it could not be reached, or none answered in time.

    ``runtime_changed`` is True when the failure came after connecting this process's
    TensorFlow runtime to a remote cluster: TensorFlow then keeps sending work to that
    cluster, so the process cannot fall back to CPU and must be restarted.
    ``can_fall_back`` is False then, and after a timeout (the attempt goes on in the
    background and may still connect the runtime). ``reason`` says what is wrong without
    the fix, in words that hold for a script and the command line alike.
    """

    def __init__(self, message: str, runtime_changed: bool = False,
                 can_fall_back: Optional[bool] = None, reason: Optional[str] = None) -> None:
        super().__init__(message)
        self.runtime_changed = runtime_changed
        self.can_fall_back = (not runtime_changed) if can_fall_back is None else can_fall_back
        self.reason = reason or message.split(" Fix:")[0].rstrip(".")


class TPUError(Error, RuntimeError):
    """A TPU is there but failed (busy, not ready, version mismatch, a bug): no fallback."""


# TensorFlow's errors that mean "there is no TPU to use here" when raised before the
# process's runtime was connected anywhere; anything else is a fault of a TPU that exists.
_NO_TPU_ERRORS = (
    tf.errors.NotFoundError,
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
)


def _resolve_target(tpu):
    """What to hand ``TPUClusterResolver``: the name given, or one found here, quickly.

    ``None`` / ``""``: ``TPU_NAME`` (or GKE's endpoints variable) when set, Colab's legacy
    ``COLAB_TPU_ADDR``, ``"local"`` on a TPU VM (TPU device files present); otherwise
    ``TPUUnavailableError`` at once, without any network wait.
    """
    if tpu not in (None, ""):
        if not isinstance(tpu, str):
            raise TypeError(
                f"tpu is {tpu!r} ({type(tpu).__name__}); expected a TPU name, "
                f"'grpc://host:port', 'local' or None."
            )
        return tpu
    if any(os.environ.get(name) for name in _TPU_ENV):
        return None  # TPUClusterResolver reads these variables itself
    if os.environ.get("COLAB_TPU_ADDR"):
        return "grpc://" + os.environ["COLAB_TPU_ADDR"]
    if any(glob.glob(pattern) for pattern in _LOCAL_TPU_DEVICES):
        return "local"
    raise TPUUnavailableError(
        "No TPU found: tpu= was not given, TPU_NAME and COLAB_TPU_ADDR are not set and "
        "this machine has no TPU devices (/dev/accel*, /dev/vfio/N). Fix: on a TPU VM "
        "pass tpu='local'; for a pod slice or a remote TPU pass its name; in Colab pick a "
        "TPU runtime; or use spatial_tf.auto(...) to fall back to the CPU emulator.",
        reason="no TPU found (TPU_NAME and COLAB_TPU_ADDR are not set, no /dev/accel* or "
               "/dev/vfio/N devices)",
    )


def _connect(tpu, timeout_s):
    """Resolve, connect to and initialize the TPU; return ``(resolver, topology)``.

    The only code that needs a real TPU. The work runs in a daemon thread so an
    unreachable TPU fails after ``timeout_s`` seconds instead of hanging.
    """
    _check_timeout(timeout_s)
    target = _resolve_target(tpu)
    shown = target if target is not None else os.environ.get("TPU_NAME", "from environment")
    log.info("Connecting to TPU %r (waiting up to %.0f s)...", shown, timeout_s)
    start = time.monotonic()
    outcome, finished = _attempt(target, timeout_s)
    changed = outcome.get("runtime_changed", False)
    if not finished:
        raise TPUUnavailableError(
            f"No answer from TPU {shown!r} within {timeout_s:g} s (resolve, connect, "
            f"initialize); the attempt continues in the background. Fix: check that the "
            f"TPU is running and reachable from this machine, or pass a larger timeout_s= "
            f"for a big pod slice.",
            runtime_changed=changed,
            can_fall_back=False,
        )
    if "error" in outcome:
        raise _failure(shown, outcome["stage"], outcome["error"], changed) from outcome["error"]
    log.info("TPU %r ready after %.1f s.", shown, time.monotonic() - start)
    return outcome["value"]


def _check_timeout(timeout_s):
    expected = f"expected a positive number of seconds, e.g. timeout_s={DEFAULT_TIMEOUT_S:.0f}."
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s={timeout_s!r} ({type(timeout_s).__name__}); {expected}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s={timeout_s!r}; {expected}")


def _attempt(target, timeout_s):
    """Resolve, connect and initialize in a daemon thread, waiting up to ``timeout_s``:
    ``(outcome, finished)``; ``outcome`` holds the last ``stage``, ``runtime_changed``,
    and the ``value`` or the ``error``."""
    outcome = {}

    def work():
        try:
            outcome["stage"] = "resolve"
            resolver = _resolver(target)
            outcome["stage"] = "connect"
            outcome["runtime_changed"] = bool(resolver.master())  # '' for a local TPU
            _connect_runtime(resolver)
            outcome["stage"] = "initialize"
            outcome["value"] = (resolver, _initialize(resolver))
        except Exception as e:  # reported to the caller
            outcome["error"] = e

    thread = threading.Thread(target=work, name="spatial_tf-tpu-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome, not thread.is_alive()


def _failure(shown, stage, e, changed):
    """The error to raise for ``e``, raised at ``stage`` of connecting to TPU ``shown``:
    ``TPUUnavailableError`` when there is no TPU (falling back to the emulator is safe
    unless the runtime was pointed at a cluster already), else ``TPUError``."""
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    no_tpu = isinstance(e, _NO_TPU_ERRORS) or (stage == "resolve" and isinstance(e, ValueError))
    if no_tpu and not changed:
        return TPUUnavailableError(
            f"Could not use TPU {shown!r}: {type(e).__name__}: {first_line}. Fix: check "
            f"the TPU name and that this machine runs a TPU build of TensorFlow "
            f"(tensorflow-tpu on TPU VMs).",
            runtime_changed=changed,
        )
    if no_tpu:
        return TPUUnavailableError(
            f"TPU {shown!r} failed after this process connected to it ({stage}): "
            f"{type(e).__name__}: {first_line}. Fix: check that the TPU is running "
            f"and healthy.",
            runtime_changed=True,
        )
    connected = (
        " This process's TensorFlow is now connected to that cluster: restart it to "
        "run locally." if changed else ""
    )
    return TPUError(
        f"TPU {shown!r} was found but failed to {stage}: {type(e).__name__}: "
        f"{first_line}. This is a fault of the TPU or its software, not a missing "
        f"TPU, so spatial_tf does not fall back to CPU. Fix: check that the TPU is "
        f"not in use by another process, that its TensorFlow version matches this "
        f"one ({tf.__version__}), and the full error chained below.{connected}"
    )


def _resolver(target):
    """TensorFlow's resolver for ``target``."""
    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=target)


def _connect_runtime(resolver):
    """Point this process's TensorFlow runtime at the TPU's cluster."""
    tf.config.experimental_connect_to_cluster(resolver)


def _initialize(resolver):
    """Initialize the TPU system; return its topology."""
    return tf.tpu.experimental.initialize_tpu_system(resolver)


def tpu_strategy(
    tpu: Optional[str] = None,
    *,
    computation_shape: Optional[Sequence[int]] = None,
    num_cores_per_replica: Optional[int] = None,
    num_replicas: Optional[int] = None,
    computation_stride: Optional[Sequence[int]] = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tf.distribute.TPUStrategy:
    """Connect to the TPU and return a spatially partitioned ``tf.distribute.TPUStrategy``.

    ``tpu``: a TPU name, ``'grpc://host:port'``, ``'local'`` (TPU VM) or None to find
    one (``TPU_NAME``, Colab, a local TPU). Give exactly one of ``computation_shape`` and
    ``num_cores_per_replica``; ``num_replicas`` defaults to all that fit. Raises
    ``TPUUnavailableError`` within about ``timeout_s`` seconds when no TPU answers.
    """
    check_exactly_one(computation_shape, num_cores_per_replica, "tpu_strategy")
    resolver, topology = _connect(tpu, timeout_s)
    choice = choose(
        topology,
        computation_shape=computation_shape,
        num_cores_per_replica=num_cores_per_replica,
        num_replicas=num_replicas,
        computation_stride=computation_stride,
    )
    assignment = choice.device_assignment()
    strategy = tf.distribute.TPUStrategy(
        resolver,
        experimental_device_assignment=assignment,
        experimental_spmd_xla_partitioning=True,
    )
    record_tpu_layout(strategy, TPULayout(choice.num_cores_per_replica, True, assignment))
    log.info(
        "TPUStrategy on %s: %s x %s, computation_shape %s.",
        slice_label(topology), plural(choice.num_replicas, "replica"),
        plural(choice.num_cores_per_replica, "core"),
        list(choice.computation_shape),
    )
    return strategy


def auto(
    tpu: Optional[str] = None,
    *,
    computation_shape: Optional[Sequence[int]] = None,
    num_cores_per_replica: Optional[int] = None,
    num_replicas: Optional[int] = None,
    computation_stride: Optional[Sequence[int]] = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tf.distribute.Strategy:
    """``tpu_strategy(...)`` on a TPU; otherwise the CPU emulator, else the default strategy.

    Arguments as for ``tpu_strategy``. Only "no TPU here" falls back: none found, a name
    that does not resolve, a TPU that is not found, unavailable or past its deadline
    before this process connected to it. Everything else raises: a request the TPU
    cannot satisfy (say, too many cores per replica), a TPU that is there but fails
    (``TPUError``: busy, version mismatch, a bug), a remote TPU that fails after this
    process connected to it, and a timeout (the attempt goes on in the background and
    may still connect this process to the TPU). The choice is one warning line on the
    ``spatial_tf`` logger, and the reason an info line (docs/tpu.md explains both).
    """
    strategy, no_tpu = _choose(tpu, computation_shape, num_cores_per_replica, num_replicas,
                               computation_stride, timeout_s)
    if no_tpu is not None and isinstance(strategy, EmulatedLayout):
        log.warning("spatial_tf.auto: no TPU here, using %r on CPU; see docs/tpu.md", strategy)
        log.info("spatial_tf.auto: no TPU because: %s. Fix for a TPU: run this on a TPU VM, "
                 "or pass tpu='NAME' (or set TPU_NAME); to skip the notice, use "
                 "spatial_tf.Emulator(...) directly.", no_tpu.reason)
    return strategy


def auto_with_reason(
    tpu: Optional[str] = None,
    *,
    computation_shape: Optional[Sequence[int]] = None,
    num_cores_per_replica: Optional[int] = None,
    num_replicas: Optional[int] = None,
    computation_stride: Optional[Sequence[int]] = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Tuple[tf.distribute.Strategy, Optional[TPUUnavailableError]]:
    """``auto(...)`` without its notice: ``(strategy, None)`` on a TPU, else ``(the CPU
    emulator or the default strategy, the TPUUnavailableError that said there is no
    TPU)``, for a caller that tells its users in its own words (its ``reason``).
    Arguments, fallback and errors as for ``auto``.
    """
    return _choose(tpu, computation_shape, num_cores_per_replica, num_replicas,
                   computation_stride, timeout_s)


def _choose(tpu, computation_shape, num_cores_per_replica, num_replicas, computation_stride,
            timeout_s):
    check_exactly_one(computation_shape, num_cores_per_replica, "auto")
    if computation_shape is not None:
        computation_shape = check_vector(computation_shape, "computation_shape", "auto")
    try:
        strategy = tpu_strategy(
            tpu,
            computation_shape=computation_shape,
            num_cores_per_replica=num_cores_per_replica,
            num_replicas=num_replicas,
            computation_stride=computation_stride,
            timeout_s=timeout_s,
        )
    except TPUUnavailableError as e:
        if e.runtime_changed:
            raise TPUUnavailableError(
                f"{e} TensorFlow in this process is now connected to that cluster and "
                f"would keep sending work there, so auto() cannot fall back to CPU. Fix: "
                f"restart the process (or notebook kernel) and call auto() without tpu= "
                f"to run locally.",
                runtime_changed=True,
            ) from e
        if not e.can_fall_back:
            raise TPUUnavailableError(
                f"{e} That attempt may still connect this process's TensorFlow to the TPU "
                f"at any moment, after which work would go there, so auto() cannot fall "
                f"back to CPU safely. Fix: pass a larger timeout_s= if the TPU is slow to "
                f"answer, or restart the process (or notebook kernel) and call auto() "
                f"without tpu= (and without TPU_NAME set) to run locally.",
                runtime_changed=e.runtime_changed,
                can_fall_back=False,
            ) from e
        no_tpu = e
    else:
        log.info("auto: using the TPU.")
        return strategy, None
    cores = num_cores_per_replica or math.prod(computation_shape or ())
    return _local_fallback(cores, num_replicas, computation_stride, str(no_tpu)), no_tpu


def _local_fallback(cores, num_replicas, computation_stride, reason):
    strategy, missing = _make_emulator(cores, num_replicas or 1)
    if strategy is not None:
        if computation_stride is not None:
            log.warning("auto: computation_stride has no meaning on the CPU emulator; ignored.")
        return strategy
    warnings.warn(
        f"spatial_tf.auto: no TPU and no CPU emulator ({missing}); using "
        f"tf.distribute.get_strategy(), which runs unpartitioned on one device, so "
        f"split() annotations do not partition anything. Fix for partitioned runs on CPU: "
        f"pip install 'spatial-tf[emulator]'. No TPU because: {reason}",
        RuntimeWarning,
        stacklevel=4,  # _local_fallback, _choose, auto(_with_reason), its caller
    )
    return tf.distribute.get_strategy()


def _make_emulator(cores, num_replicas):
    """``(Emulator, None)``, or ``(None, why not)`` when jax/jaxlib are not installed."""
    try:
        emulator = importlib.import_module("spatial_tf.emulator")
        return emulator.Emulator(num_cores_per_replica=cores, num_replicas=num_replicas), None
    except ImportError as e:
        return None, f"{type(e).__name__}: {e}"
