"""Make a user's built Keras or tf_keras model keep its split through the training step.

XLA's SPMD partitioner keeps a split activation split through most layers, but two
kinds of layer, as TensorFlow computes them, cost memory on every core:

- tf_keras' fused batch norm (``FusedBatchNormV3``) cannot be partitioned: XLA gathers
  the whole activation on every core. The unfused form computes the same normalization
  and moving averages and needs only an all-reduce of per-channel sums.
- A stride-1 convolution's kernel gradient, as TensorFlow computes it, reads the *input*
  with its halo: XLA builds that padded copy in the forward pass and keeps it until the
  backward pass, beside the plain input. The same gradient computed from the output
  gradient's halo (``spatial_tf.halo_conv.conv_keeping_input_unpadded``) keeps the stored
  input unpadded.

- An optimizer updates a weight in place, and XLA orders that update after the reads
  the update's gradient depends on, not after the others: a convolution's input gradient
  and a weight regularizer's value read the kernel too, so XLA keeps a copy of the kernel
  for them (``spatial_tf.update_order``). Making the kernel's gradient depend on them
  orders the update last. Every convolution gets the order; transposed and separable
  ones, which have no ``convolution_op``, around their whole call.

- XLA gathers a grouped convolution's split input (``groups`` between 1 and the
  channels) whole on every core; it becomes one convolution per group
  (``spatial_tf.halo_conv.conv_by_groups``), each in the forms above. A depthwise one
  (``DepthwiseConv2D``, or ``groups`` equal to the channels) keeps the split as it is.

- XLA gathers TensorFlow's resize ops (Keras' ``Resizing``, ``UpSampling2D`` with
  bilinear interpolation) whole on every core. By integer factors, ``Resizing``,
  ``UpSampling2D`` and ``UpSampling3D`` are computed as ``spatial_tf.resize`` computes
  them (the same values); other settings are left, the ``Change`` saying what to change.

- With ``space_to_depth=True``, a strided convolution of few input channels (an image
  or clip stem) is computed at stride 1 on its input's patches folded into the channels
  (``spatial_tf.space_to_depth``): the same values; on a TPU, which pads few channels to
  128 lanes, less memory for its input. Off by default (docs/benchmarks.md says why).

- For a TPU (``target="v5e"``, or called inside a TPUStrategy's scope), stride-1
  convolutions keep TensorFlow's kernel gradient, only ordered: on XLA's TPU compiler
  the halo form's step was never predicted faster by more than 0.2% (docs/benchmarks.md,
  "Which form for which TPU").

Which Keras classes are of which kind is ``spatial_tf.layer_kinds``' table.

``partition_friendly(model)`` changes all three in place, on the layer objects the model (or a
framework such as Model Garden's trainer) already holds: no layer is replaced, so weights,
variable names and checkpoint keys stay as they are, and a checkpoint written before the
call restores after it and the reverse. Results and gradients are the same (float64
agrees to rounding). Call it before the first step is traced.

With ``optimizer=``, the optimizer the step uses also keeps the gradients whole on every
core (``keep_gradients_whole``), as the weights are; otherwise XLA may tile a kernel's
gradient and its update along the split and gather the updated kernel back.

>>> import keras
>>> inputs = keras.Input((8, 8, 1))
>>> x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
>>> head = keras.layers.Conv2D(2, 1, strides=2, kernel_regularizer="l2", name="head")
>>> model = keras.Model(inputs, head(x), name="net")
>>> for change in partition_friendly(model):
...     print(change.path, ":", change.after)
net/conv : Conv2D computing its kernel gradient from the output gradient's halo
net/head : Conv2D with its kernel gradient made to wait for its input gradient
net/head : kernel regularizer ordered before the update
>>> [c for c in partition_friendly(model) if c.changed]   # idempotent: nothing left
[]
"""
import dataclasses
import functools
import warnings
from typing import Any, Callable, Iterator, List, Optional, Tuple

import tensorflow as tf

from spatial_tf import context, frames, layer_kinds, tpu_generations
from spatial_tf._tf_internals import (callable_losses, child_layers, own_trainable_variables,
                                      weight_regularization)
from spatial_tf.annotate import annotate_tensor
from spatial_tf.halo_conv import conv_by_groups, conv_of_concatenation
from spatial_tf.space_to_depth import space_to_depth_problem, strided_conv_by_space_to_depth
from spatial_tf.spec import Replicate
from spatial_tf.table import plural
from spatial_tf.update_order import (is_ordered, ordered_call, ordered_convolution,
                                     ordered_loss, ordered_regularizer)

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["partition_friendly", "Change", "PartitionFriendlyWarning", "unfuse_batch_norm",
           "keep_gradients_whole", "changed_layers"]

_MARK = "_spatial_tf_partition_friendly"

_HALO = ("{name} computing its kernel gradient from the output gradient's halo",
         "a stride-1 convolution's kernel gradient otherwise keeps a padded copy of its "
         "input from the forward to the backward pass")
_UNFUSED = ("{name}(fused=False)",
            "fused batch norm (FusedBatchNormV3) cannot be partitioned: XLA gathers the "
            "whole activation on every core")
_WHOLE = ("{name} annotating each gradient whole on every core before its update",
          "XLA otherwise may tile a kernel's gradient and the update along the split, then "
          "gather the updated kernel back on every core")
_ORDERED = ("{name} with its kernel gradient made to wait for its input gradient",
            "{kind}; without the order, XLA keeps a copy of the kernel for the input "
            "gradient while an optimizer updates the kernel in place")
_ORDERED_CALL = "{name} with its weight gradients made to wait for its input gradient"
_STRIDED = ("XLA partitions a strided or dilated convolution's gradients with halo exchanges "
            "only; the halo form would need the output gradient upsampled with zeros, which "
            "costs more")
_GROUPED = ("{name} as one convolution per group, each {each}",
            "XLA's SPMD partitioner gathers a grouped convolution's split input whole on "
            "every core (forward and both gradients); one convolution per group keeps the "
            "split")
_DEPTHWISE = ("a depthwise convolution (one input channel per group) keeps the split as "
              "it is: XLA partitions it and both its gradients with halo exchanges, and "
              "a halo form of its kernel gradient, or the update order, would take more "
              "memory per core (its kernel is small)")
FOLD_CHANNELS = 8
_FOLDED = ("{name} at stride 1 on its input's patches folded into the channels (space to "
           "depth), its kernel gradient made to wait for its input gradient",
           "a TPU pads an activation of few channels to its 128 lanes; folded, the input "
           "held for the kernel gradient takes 1/stride**2 of that (space_to_depth=True)")
_REGULARIZED = ("{names} ordered before the update",
                "a regularizer's read of a weight reaches only the loss value, which no "
                "gradient depends on: without the order, XLA keeps a copy of the weight for "
                "it while an optimizer updates the weight in place")


class PartitionFriendlyWarning(UserWarning):
    """A layer ``partition_friendly`` could not make keep the split."""


@dataclasses.dataclass(frozen=True)
class Change:
    """One layer ``partition_friendly`` looked at.

    Attributes:
      path: the layer's path from the model (``"model/block_1/conv2d"``).
      before: the layer's class.
      after: what it computes now, or ``"unchanged"`` (then ``why`` says why).
      why: the reason.
      handled: False for a layer that may still gather or keep halo copies, changed
        (only ordered) or not.
    """

    path: str
    before: str
    after: str
    why: str
    handled: bool = True

    @property
    def changed(self) -> bool:
        return self.after != "unchanged"

    def __str__(self):
        return f"{self.path}: {self.before} -> {self.after} ({self.why})"


def partition_friendly(model, *, optimizer: Any = None, warn: bool = True,
                       halo: Optional[bool] = None, space_to_depth: bool = False,
                       target: Any = None) -> List[Change]:
    """Change ``model``'s layers in place so its training step keeps the split.

    Args:
      model: a built Keras 3 or tf_keras model or layer (functional, Sequential,
        subclassed; nested models and layers held in attributes are reached too).
      optimizer: the Keras 3 or tf_keras optimizer the step updates ``model`` with (e.g.
        a Model Garden trainer's ``trainer.optimizer``), made to keep the gradients whole
        (``keep_gradients_whole``), for a step one cannot edit.
      warn: warn once, naming them, about layers that may still break the split.
      halo: compute stride-1 convolutions' kernel gradients from the output gradient's
        halo (and a concatenation's convolution piecewise); ``False`` keeps TensorFlow's
        kernel gradient, only ordered before the update. By default (None) the halo form,
        but TensorFlow's with a ``target`` or inside a TPUStrategy's scope (on a TPU): on
        XLA's TPU compiler (v5e and v3, a keras-io U-Net and Model Garden's RetinaNet)
        ``halo=False`` predicted a step as fast (within 0.2%) or faster every time (up
        to 26%), with temp per core from 22% less to 8% more, where the emulator's
        XLA:CPU figures favour the halo form (docs/benchmarks.md, "Which form for which
        TPU").
      space_to_depth: also compute each strided convolution of fewer than
        ``FOLD_CHANNELS`` input channels (an image or clip stem) at stride 1 on its
        input's patches folded into the channels (``spatial_tf.space_to_depth``): a
        TPU then pads a quarter as much of it to its 128 lanes at stride 2. Off by
        default: on the TPU compiler for v5e it made MoViNet-A0's split step smaller
        and faster but its one-core step larger (docs/benchmarks.md).
      target: the TPU the step is for (a generation or slice name such as ``"v5e"`` or
        ``"v3-8"``), or None: the forms the emulator's XLA:CPU figures favour, or a
        TPU's inside a TPUStrategy's scope. On the emulator, give the name you give
        ``report(..., target=...)`` or a plan's ``budget``, so that it compiles the
        model the TPU will run.

    Returns:
      One ``Change`` for ``optimizer`` (when given), one per layer changed, and one per
      convolution, batch norm or resize left unchanged (with the reason); a second call
      changes nothing (its ``Change`` s are all ``"unchanged"``).

    Raises:
      TypeError: ``model`` is not a Keras or tf_keras layer, or ``optimizer`` not an
        optimizer; nothing is changed.
      ValueError: ``model`` (or a layer in it) is not built yet; nothing is changed.
    """
    if not (hasattr(model, "trainable_weights") and hasattr(model, "built")):
        raise TypeError(
            f"partition_friendly: got {type(model).__name__}; expected a built Keras or "
            f"tf_keras model or layer. Fix: pass the model itself (e.g. a Model Garden "
            f"trainer's trainer.model).")
    halo = _halo_for(halo, target)
    plans = ([_optimizer_plan(optimizer)] if optimizer is not None else []) + _layer_plans(
        model, halo=halo, space_to_depth=space_to_depth)
    for change, apply in plans:  # all checked first: a failure above changes nothing
        if apply is not None:
            apply()
    if any(apply is not None for _, apply in plans):
        context.note_model_change()  # steps traced before are traced again
    unhandled = [change for change, _ in plans if not change.handled]
    if warn and unhandled:
        _warn_unhandled(unhandled)
    return [change for change, _ in plans]


def _halo_for(halo: Optional[bool], target: Any) -> bool:
    """Whether stride-1 convolutions take the halo form: ``halo`` if given, else the
    default for ``target`` (the halo form on XLA:CPU, TensorFlow's on a TPU: a target,
    or no target inside a TPUStrategy's scope).

    >>> _halo_for(None, None), _halo_for(None, "v5e"), _halo_for(True, "v3")
    (True, False, True)
    """
    if halo is not None and not isinstance(halo, bool):
        raise TypeError(f"partition_friendly: halo is {halo!r}; expected True, False or None "
                        f"(the default for the target). Fix: halo=False for TensorFlow's "
                        f"kernel gradient.")
    if target is not None:
        name = getattr(target, "name", target)  # the emulator's TpuTarget gives its name
        try:
            tpu_generations.parse(name)
        except (TypeError, ValueError) as e:
            raise type(e)(f"partition_friendly: target: {e}") from None
    if halo is not None:
        return halo
    in_tpu_scope = tf.distribute.has_strategy() and isinstance(
        tf.distribute.get_strategy(), context.TPUStrategyLike)
    return target is None and not in_tpu_scope


def _layer_plans(model, *, halo: bool = True, space_to_depth: bool = False
                 ) -> List[Tuple[Change, Optional[Callable[[], None]]]]:
    """A ``(Change, apply or None)`` per layer a rule covers and per regularizer, every
    layer checked before any is changed."""
    plans: List[Tuple[Change, Optional[Callable[[], None]]]] = []
    for path, layer in _walk(model):
        rule = _rule_for(layer)
        if rule is _conv:
            rule = functools.partial(_conv, halo=halo, space_to_depth=space_to_depth)
        if rule is None:
            continue
        if getattr(layer, _MARK, False):
            plans.append((Change(path, type(layer).__name__, "unchanged",
                                 "changed by an earlier partition_friendly call"), None))
            continue
        if not layer.built:
            raise ValueError(
                f"partition_friendly: layer {path} ({type(layer).__name__}) is not built yet, "
                f"so its configuration cannot be checked; nothing was changed. Fix: build "
                f"the model first (call it once on a batch, or model.build(input_shape)).")
        plans.append(rule(path, layer))
    for path, layer in _walk(model):
        plans.extend(_regularizers(path, layer))
    return plans


def _warn_unhandled(unhandled):
    """The one warning about layers left with TensorFlow's own gradient."""
    kinds = ", ".join(dict.fromkeys(c.before for c in unhandled))
    warnings.warn(
        f"partition_friendly: {plural(len(unhandled), 'layer')} ({kinds}; the first "
        f"{unhandled[0].path}) {'keeps' if len(unhandled) == 1 else 'keep'} TensorFlow's "
        f"own gradient, only ordered before the update. Whether that gathers an "
        f"activation depends on the split and the sizes at each layer, which the model "
        f"alone does not tell (at most levels it does not). Fix: "
        f"spatial_tf.Emulator(...).report(step, args) names each layer that gathers under "
        f"your split, with its line; the returned Changes with handled=False list them "
        f"all, each with the reason (warn=False silences this).",
        PartitionFriendlyWarning, stacklevel=3)  # the caller of partition_friendly


def changed_layers(changes: List[Change]) -> List[str]:
    """The paths of the layers ``changes`` changed, each once (the optimizer not counted).

    >>> changed_layers([Change("m/a", "Conv2D", "x", ""), Change("m/a", "kernel regularizer",
    ...                 "y", ""), Change("m/b", "Dense", "unchanged", "")])
    ['m/a']
    """
    return list(dict.fromkeys(c.path for c in changes
                              if c.changed and not c.path.startswith("optimizer/")))


def keep_gradients_whole(optimizer: Any) -> Change:
    """Make ``optimizer`` annotate every gradient as whole on every core before it
    updates the weights, as ``spatial_tf.split(grads, [None] * len(grads))`` would in a
    step one cannot edit (``fit``'s, a framework's trainer). Left alone, XLA may tile a
    kernel's gradient, and so the optimizer's update, along the split and gather the
    updated kernel back: kernel-sized copies and an all-gather per layer. The update is
    the same; a second call changes nothing.

    >>> import keras
    >>> print(keep_gradients_whole(keras.optimizers.SGD(0.1, name="sgd")))
    optimizer/sgd: SGD -> SGD annotating each gradient whole on every core before its update (XLA otherwise may tile a kernel's gradient and the update along the split, then gather the updated kernel back on every core)
    """
    change, apply = _optimizer_plan(optimizer)
    if apply is not None:
        apply()
        context.note_model_change()
    return change


def _optimizer_plan(optimizer):
    name = type(optimizer).__name__
    path = f"optimizer/{getattr(optimizer, 'name', name)}"
    if getattr(optimizer, _MARK, False):
        return Change(path, name, "unchanged", "changed by an earlier call"), None
    method = "apply" if _is_keras3_optimizer(optimizer) else "apply_gradients"
    original = getattr(optimizer, method, None)
    if not callable(original):
        raise TypeError(
            f"keep_gradients_whole: got {name}, which has no apply_gradients; "
            f"expected a Keras 3 or tf_keras optimizer. Fix: pass the optimizer the step "
            f"calls apply_gradients on (e.g. trainer.optimizer).")

    def whole_apply(grads, *args, **kwargs):
        if method == "apply":  # Keras 3: apply(grads, trainable_variables)
            return original(_whole(grads), *args, **kwargs)
        pairs = list(grads)  # tf_keras: apply_gradients(grads_and_vars)
        whole = _whole([g for g, _ in pairs])
        return original(list(zip(whole, [v for _, v in pairs])), *args, **kwargs)

    def apply():
        setattr(optimizer, method, whole_apply)
        setattr(optimizer, _MARK, True)

    return Change(path, name, _WHOLE[0].format(name=name), _WHOLE[1]), apply


def _is_keras3_optimizer(optimizer) -> bool:
    import keras

    return isinstance(optimizer, keras.optimizers.Optimizer)


def _whole(grads) -> List:
    """Each dense gradient annotated as whole on every core (None and sparse ones as they are)."""
    return [annotate_tensor(g, Replicate(), 1) if isinstance(g, tf.Tensor) else g
            for g in grads]


def unfuse_batch_norm(model) -> List[str]:
    """Make every fused batch norm layer of ``model`` (nested models and layers too) unfused.

    For tf_keras models (Model Garden's), whose ``BatchNormalization`` uses the fused
    kernel by default; the weights and the math are unchanged. ``partition_friendly``
    does this and more. Call it before the first (traced) step: a step already compiled
    keeps the kernel it was traced with. Keras 3's ``BatchNormalization`` is never fused.
    Returns the names of the layers changed.

    >>> import keras
    >>> model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.BatchNormalization()])
    >>> unfuse_batch_norm(model)
    []
    """
    if not hasattr(model, "trainable_weights"):
        raise TypeError(f"unfuse_batch_norm: got {type(model).__name__}; expected a Keras or "
                        f"tf_keras model (or layer).")
    changed = []
    for path, layer in _walk(model):
        if _rule_for(layer) is _batch_norm:
            change, apply = _batch_norm(path, layer)
            if apply is not None:
                apply()
                changed.append(layer.name)
    if changed:
        context.note_model_change()
    return changed


def _walk(model) -> Iterator[Tuple[str, Any]]:
    """``(path, layer)`` for ``model`` and every layer below it, each once, depth first."""
    seen = set()
    pending = [(model.name, model)]
    while pending:
        path, layer = pending.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        yield path, layer
        children = child_layers(layer)
        pending.extend((f"{path}/{child.name}", child) for child in reversed(children))
    # tf_keras layers are tf.Modules, which list every module below them, layers kept in
    # plain containers of a custom layer included
    for module in getattr(model, "submodules", ()):
        if id(module) not in seen and hasattr(module, "trainable_weights"):
            seen.add(id(module))
            yield f"{model.name}/.../{module.name}", module


def _rule_for(layer):
    """The plan maker for ``layer``'s kind (``spatial_tf.layer_kinds``), or None."""
    kind = layer_kinds.kind_of(type(layer))
    return None if kind is None else _RULES[kind.change]


def _batch_norm(path, layer):
    before = type(layer).__name__
    fused = getattr(layer, "fused", False)
    if fused is False:  # Keras 3, or tf_keras already unfused / synchronized
        return Change(path, before, "unchanged", "not fused: keeps the split"), None
    after = _UNFUSED[0].format(name=before)

    def apply():
        layer.fused = False  # None (decided at build) or True: both may pick the fused kernel
        setattr(layer, _MARK, True)

    return Change(path, f"{before}(fused={fused})", after, _UNFUSED[1]), apply


def _conv(path, layer, halo=True, space_to_depth=False):
    before = type(layer).__name__
    problem = _unsupported_conv(layer)
    if problem:
        return _with_ordered_call(path, layer, problem, handled=False)
    groups = int(getattr(layer, "groups", 1) or 1)
    if groups > 1 and int(layer.kernel.shape[-2]) == 1:  # depthwise, as Model Garden builds it
        return _keep(path, layer)
    if any(s != 1 for s in layer.strides) or any(d != 1 for d in layer.dilation_rate):
        if (space_to_depth and groups == 1 and all(d == 1 for d in layer.dilation_rate)
                and int(layer.kernel.shape[-2]) < FOLD_CHANNELS):
            return _folded(path, layer)
        kind = _STRIDED
    elif all(k == 1 for k in layer.kernel_size):
        kind = "a 1x1 convolution needs no halo"
    elif not halo:
        kind = "halo=False (the default for a TPU target) keeps TensorFlow's kernel gradient"
    else:
        padding = layer.padding.upper()
        if groups > 1:
            return _with_convolution_op(
                path, layer, lambda _, x, kernel: conv_by_groups(x, kernel, groups, padding),
                _GROUPED[0].format(name=before, each=_HALO[0].format(name="").strip()),
                f"{_GROUPED[1]}; {_HALO[1]}")
        return _with_convolution_op(
            path, layer,
            lambda _, x, kernel: conv_of_concatenation(_concatenated(x), kernel, padding),
            _HALO[0].format(name=before), _HALO[1])
    if groups > 1:  # TensorFlow's own gradients per group, each kernel's ordered
        def per_group(original, x, kernel):
            return conv_by_groups(x, kernel, groups, convolve=lambda piece, kernel_piece:
                                  ordered_convolution(original, piece, kernel_piece))
        each = _ORDERED[0].format(name="").strip()
        return _with_convolution_op(path, layer, per_group,
                                    _GROUPED[0].format(name=before, each=each),
                                    f"{_GROUPED[1]}; {_ORDERED[1].format(kind=kind)}")
    # TensorFlow's own gradients, the kernel's made to wait for the input's
    return _with_convolution_op(path, layer, ordered_convolution,
                                _ORDERED[0].format(name=before), _ORDERED[1].format(kind=kind))


def _folded(path, layer):
    """The plan computing a strided convolution of few input channels on its input's
    patches folded into the channels, its kernel gradient ordered; an input whose size
    is not a multiple of the stride keeps TensorFlow's strided convolution, ordered."""
    strides, padding = list(layer.strides), layer.padding.upper()

    def convolve(original, x, kernel):
        if space_to_depth_problem(x.shape, layer.kernel_size, strides, padding):
            return ordered_convolution(original, x, kernel)
        return ordered_convolution(
            lambda a, b: strided_conv_by_space_to_depth(a, b, strides, padding), x, kernel)

    return _with_convolution_op(path, layer, convolve,
                                _FOLDED[0].format(name=type(layer).__name__), _FOLDED[1])


def _with_convolution_op(path, layer, convolve, after, why):
    """The plan giving ``layer`` the convolution ``convolve(original_op, inputs, kernel)``."""
    original = layer.convolution_op

    def convolution_op(inputs, kernel):
        if len(inputs.shape) != layer.rank + 2:  # let Keras' own op give its error
            return original(inputs, kernel)
        return convolve(original, inputs, tf.convert_to_tensor(kernel))

    def apply():
        layer.convolution_op = convolution_op
        setattr(layer, _MARK, True)

    return Change(path, type(layer).__name__, after, why), apply


def _with_ordered_call(path, layer, why, handled=True):
    """The plan making the gradients of the weights ``layer`` reads wait for its input
    gradient (``update_order.ordered_call`` around its call), TensorFlow's gradients kept."""
    original = layer.call

    def call(inputs, *args, **kwargs):
        if not tf.is_tensor(inputs):  # several inputs: Keras' own call gives its error
            return original(inputs, *args, **kwargs)
        return ordered_call(lambda x: original(x, *args, **kwargs), inputs)

    def apply():
        layer.call = call
        setattr(layer, _MARK, True)

    name = type(layer).__name__
    return Change(path, name, _ORDERED_CALL.format(name=name), why, handled), apply


def _regularizers(path, layer) -> List[Tuple[Change, Optional[Callable[[], None]]]]:
    """The plan ordering ``layer``'s own weight regularizers before the weights' update:
    tf_keras keeps them as callable losses, Keras 3 on each variable."""
    found = {i: weight_regularization(loss)
             for i, loss in enumerate(callable_losses(layer))}
    tf_keras_losses = {i: pair for i, pair in found.items() if pair is not None}
    keras3_variables = [v for v in own_trainable_variables(layer)
                        if getattr(v, "regularizer", None) is not None
                        and not is_ordered(v.regularizer)]
    if not (tf_keras_losses or keras3_variables):
        return []
    names = ([_short_name(inner.args[0]) for _, inner in tf_keras_losses.values()]
             + [_short_name(v) for v in keras3_variables])
    listed = f"{', '.join(names)} regularizer{'s' if len(names) > 1 else ''}"

    def apply():
        for i, (tag, inner) in tf_keras_losses.items():
            ordered = ordered_loss(inner)
            callable_losses(layer)[i] = (ordered if tag is None
                                         else functools.partial(tag, ordered))
        for variable in keras3_variables:
            variable.regularizer = ordered_regularizer(variable.regularizer)

    return [(Change(path, listed, _REGULARIZED[0].format(names=listed), _REGULARIZED[1]),
             apply)]


def _short_name(variable) -> str:
    """``kernel`` for tf_keras' ``conv2d/kernel:0`` and Keras 3's ``kernel``."""
    return variable.name.split("/")[-1].split(":")[0]


def _concatenated(x) -> List:
    """The tensors ``x`` concatenates along its channels (in a traced step), else ``[x]``.

    Convolving the pieces separately (``conv_of_concatenation``) leaves the concatenation
    unused when the convolution is its only reader (a U-Net's skip connection), so XLA
    never builds it and never gives it a halo.
    """
    op = getattr(x, "op", None)
    if op is None or tf.executing_eagerly() or op.type != "ConcatV2":
        return [x]
    axis = tf.get_static_value(op.inputs[-1])
    pieces = list(op.inputs[:-1])
    rank = len(x.shape)
    if axis is None or int(axis) % rank != rank - 1 or any(
            p.shape[-1] is None or tuple(p.shape[:-1]) != tuple(x.shape[:-1]) for p in pieces):
        return [x]
    return pieces


def _unsupported_conv(layer) -> str:
    """Why the halo form cannot compute exactly what ``layer`` computes ('' if it can)."""
    owner = _defining_class(type(layer), "convolution_op")
    if owner is None or owner.__name__ not in ("BaseConv", "Conv"):
        return ("its class overrides convolution_op, so the halo form would not compute "
                "what it computes; compute its kernel gradient with "
                "spatial_tf.halo_conv.conv_keeping_input_unpadded in that override")
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        return ("channels_first: the halo form needs channels last; build the layer with "
                "data_format='channels_last'")
    if str(layer.padding).lower() not in ("same", "valid"):
        return f"padding={layer.padding!r}: the halo form computes 'same' and 'valid' only"
    return ""


def _defining_class(cls, attribute):
    for klass in cls.__mro__:
        if attribute in vars(klass):
            return klass
    return None


def _keep(path, layer):
    """A depthwise convolution, left as it is (``_DEPTHWISE`` says why)."""
    return Change(path, type(layer).__name__, "unchanged", _DEPTHWISE), None


def _other_conv(path, layer):
    kind = layer_kinds.kind_of(type(layer)).name
    if (kind == "transposed convolution"
            and tuple(layer.kernel_size) == tuple(layer.strides)
            and all(d == 1 for d in layer.dilation_rate)):
        why = "a transposed convolution whose kernel equals its stride needs no halo"
        return _with_ordered_call(path, layer, _ORDERED[1].format(kind=why))
    return _with_ordered_call(
        path, layer,
        "transposed and separable convolutions keep TensorFlow's gradient, only ordered "
        "before the update: check spatial_tf.Emulator.report for gathers at this layer",
        handled=False)


def _resizing(path, layer):
    """Keras' ``Resizing``, ``UpSampling2D`` and ``UpSampling3D`` by integer factors,
    computed as ``spatial_tf.resize`` computes them (the same values, no gather under a
    split); other settings keep Keras' own, the ``Change`` saying what to change
    (``spatial_tf.resize_layers.replacement``)."""
    from spatial_tf.resize_layers import replacement

    name = type(layer).__name__
    found = replacement(layer)
    if found.call is None:
        return Change(path, name, "unchanged", found.why, handled=False), None

    def apply():
        layer.call = found.call
        setattr(layer, _MARK, True)

    return Change(path, name, found.after, found.why), apply


_RULES = {"halo": _conv, "ordered": _other_conv, "unfuse": _batch_norm, "keep": _keep,
          "resize": _resizing, "none": None}
"""The plan maker for each ``layer_kinds.CHANGES`` entry."""
