"""What the train, evaluate, predict, demo and detection commands share: the default
split, training until a signal, and reading a model dir's checkpoint."""
import math
import signal
import sys

from spatial_tf.table import plural

__all__ = ["default_spec", "train_until_signal", "load", "restore", "where", "strategy_for",
           "signal_name", "refuse_untrained", "model_dir_problem"]


def signal_name(signum):
    """A signal as a user knows it.

    >>> signal_name(2), signal_name(15), signal_name(99)
    ('Ctrl-C (SIGINT)', 'SIGTERM', 'signal 99')
    """
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return "Ctrl-C (SIGINT)" if name == "SIGINT" else name


def where(strategy):
    """Where a command's steps run, in a user's words (no TensorFlow class names).

    >>> import tensorflow as tf
    >>> where(tf.distribute.get_strategy())
    'one device (unpartitioned)'
    """
    from spatial_tf import context

    replicas = strategy.num_replicas_in_sync
    several = f", {replicas} replicas" if replicas > 1 else ""
    if isinstance(strategy, context.EmulatedLayout):
        return f"the CPU emulator ({strategy.num_cores_per_replica} cores per replica{several})"
    if isinstance(strategy, context.TPUStrategyLike):
        return f"TPU ({plural(replicas, 'replica')})"
    return "one device (unpartitioned)" if replicas == 1 else f"{replicas} devices"


def strategy_for(prog, args, cores, replicas=None):
    """The strategy ``args.device`` (``--device``) asks for, ``cores`` per replica and
    ``replicas`` (None: all that fit on a TPU, one on CPU). ``auto``: a TPU when one is
    found, else the CPU emulator, saying so in one line on stderr; ``tpu``: the TPU, or
    ValueError (``argument --device: ...``) when there is none; ``cpu``: the CPU emulator,
    without that line."""
    import spatial_tf
    from spatial_tf import strategy as chooser

    device = getattr(args, "device", "auto")
    if device == "cpu":
        try:
            return spatial_tf.Emulator(num_cores_per_replica=cores, num_replicas=replicas or 1)
        except ImportError as e:
            raise ValueError(f"argument --device: cpu needs the CPU emulator, which does not "
                             f"import here ({e}); expected jax and jaxlib installed. Fix: pip "
                             f"install 'spatial-tf[emulator]'") from None
    if device == "tpu":
        try:
            return chooser.tpu_strategy(num_cores_per_replica=cores, num_replicas=replicas)
        except chooser.TPUUnavailableError as e:
            raise ValueError(f"argument --device: tpu is not possible here: {e.reason}; "
                             f"expected a Cloud TPU VM, a Colab TPU runtime or TPU_NAME naming "
                             f"a TPU. Fix: run there, or pass --device cpu for the CPU "
                             f"emulator") from None
    strategy, no_tpu = chooser.auto_with_reason(num_cores_per_replica=cores,
                                                num_replicas=replicas)
    if no_tpu is not None:
        print(f"{prog}: running on {where(strategy)}: {no_tpu.reason}; pass --device cpu to "
              f"choose it without this line", file=sys.stderr, flush=True)
    return strategy


def default_spec(cores):
    """Split the three spatial axes as evenly as possible over ``cores``.

    >>> default_spec(8), default_spec(4), default_spec(1)
    ([1, 2, 2, 2, 1], [1, 2, 2, 1, 1], [1, 1, 1, 1, 1])
    """
    spec = [1, 1, 1, 1, 1]
    axis = 1
    while math.prod(spec) < cores:
        spec[axis] *= 2
        axis = axis % 3 + 1
    return spec


def train_until_signal(args, strategy, model, optimizer, dist, describe, *, spec=None,
                       step_fn=None):
    """``spatial_tf.train.train`` to ``--steps`` with the command's options; SIGTERM and
    Ctrl-C save a checkpoint of the finished step. Prints the last step
    (``describe(last)`` after training, or that it was trained already) and returns the
    command's exit code: 0, or 130 after saying on stderr that a signal stopped it.
    ``spec`` and ``step_fn`` go to ``train``."""
    from spatial_tf import train

    stop = {"signal": None}

    def handler(signum, frame):
        stop["signal"] = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        options = train.TrainOptions(checkpoint_every=args.checkpoint_every,
                                     progress=not args.no_progress, step_fn=step_fn,
                                     log_every=getattr(args, "log_every", None),
                                     stop=lambda: stop["signal"] is not None)
        last = train.train(strategy, model, optimizer, dist, steps=args.steps,
                           model_dir=args.model_dir, spec=spec, options=options)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if last.get("stopped"):
        print(f"python -m spatial_tf train: stopped by {signal_name(stop['signal'])} at step "
              f"{last['step']}; checkpoint saved, run the same command to resume",
              file=sys.stderr, flush=True)
        return 130
    if "loss" in last:
        print(f"step {last['step']}: {describe(last)}")
    else:
        print(f"step {last['step']}: already trained to --steps {args.steps}")
    return 0


def refuse_untrained(model_dir):
    """Raise what evaluate and predict say of a ``--model-dir`` without a trained model."""
    raise ValueError(f"argument --model-dir: {model_dir} holds no trained model (no "
                     f"model.json and checkpoint); expected the --model-dir of python -m "
                     f"spatial_tf train. Fix: train first or check the path")


def model_dir_problem(model_dir):
    """What is wrong with ``model_dir`` as a trained model's folder, found from its
    ``model.json`` without TensorFlow (its checkpoints are read later), or None."""
    from spatial_tf.commands import volumes

    try:
        if volumes.read_record(model_dir) is None:
            refuse_untrained(model_dir)
    except (ValueError, OSError) as e:
        return str(e)
    return None


def load(prog, model_dir):
    """``(record, checkpoint)`` of a model dir: its ``model.json`` and its newest readable
    checkpoint; newer damaged ones are passed over, saying so on stderr (one line). Raise
    ValueError naming the dir when it holds no trained model or nothing readable."""
    from spatial_tf.commands import volumes

    record = volumes.read_record(model_dir)
    from spatial_tf.train import CheckpointUnreadableError, newest_readable

    try:
        found = newest_readable(model_dir) if record is not None else None
    except CheckpointUnreadableError as e:
        raise ValueError(f"argument --model-dir: {e}") from None
    if found is None or found.path is None:
        refuse_untrained(model_dir)
    if found.notice():
        print(f"{prog}: {found.notice()}", file=sys.stderr, flush=True)
    return record, found.path


def restore(model, checkpoint) -> int:
    """Load ``model``'s weights from ``checkpoint``; return its global step."""
    import tensorflow as tf

    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(model=model, step=step).restore(checkpoint).expect_partial() \
        .assert_existing_objects_matched()
    return int(step.numpy())
