"""Trace a step function into one XLA program: its HLO, inputs, variables and writes.

``trace(fn, args, kwargs)`` compiles ``fn`` with ``tf.function(jit_compile=True)`` for
the shapes of ``args`` and returns a ``Traced``: the ``HloModuleProto`` (with the sharding
annotations ``split`` added), the tensor arguments and captured values that feed the
program's parameters in order, which outputs are variable writes (the module's
``input_output_alias``) and how to pack results back into ``fn``'s output structure.
No jax is needed here.

>>> import tensorflow as tf
>>> v = tf.Variable(1.0)
>>> def step(x, scale=2.0):
...     v.assign_add(tf.reduce_sum(x))
...     return {"y": x * scale}
>>> traced = trace(step, (tf.ones([2]),), {})
>>> traced.arg_specs, len(traced.captures), traced.writes
((TensorSpec(shape=(2,), dtype=tf.float32, name=None),), 1, ((1, 0),))
"""
import collections.abc
import contextlib

import numpy as np
import tensorflow as tf

from spatial_tf._tf_internals import hlo_pb2, xla_data_pb2
from spatial_tf.emulator.compile import host_ops
from spatial_tf.emulator.xla import errors
from spatial_tf.emulator.summaries import graph, writes
from spatial_tf.emulator.xla.handles import HandleVariable, is_variable
from spatial_tf.spec import flatten_with_paths

__all__ = ["Outline", "Traced", "CallSignature", "outline", "trace", "function_name", "leaf_paths"]


def function_name(fn):
    """A readable name for ``fn`` (a function, method or ``tf.function``)."""
    fn = getattr(fn, "python_function", fn)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return name.rsplit("<locals>.", 1)[-1]


class _Slot:
    """Stands for one tensor argument inside an argument template."""

    __slots__ = ()


_SLOT = _Slot()


class CallSignature:
    """``(args, kwargs)`` split into tensor leaves and everything else.

    ``key`` is hashable and equal for calls that trace to the same program: the same
    nesting, the same non-tensor values and tensors of the same shapes and dtypes. A
    ``tf.TensorSpec`` stands for a tensor of its shape and dtype (for ``lower``,
    ``compile`` and ``report``, which need no values); ``without_values`` lists where.

    >>> CallSignature((tf.TensorSpec([2, 3]),), None).without_values
    ['args[0]']
    """

    def __init__(self, args, kwargs):
        if not isinstance(args, (list, tuple)):
            raise TypeError(
                f"args is {type(args).__name__}; expected a tuple of positional "
                f"arguments, e.g. args=(batch,)."
            )
        if kwargs is not None and not isinstance(kwargs, collections.abc.Mapping):
            raise TypeError(
                f"kwargs is {type(kwargs).__name__}; expected a dict of keyword arguments "
                f"or None."
            )
        tree = (tuple(args), dict(kwargs or {}))
        leaves = tf.nest.flatten(tree)
        self.tensors = []
        self.paths = []  # of the tensors, e.g. "args[0]['image']"
        template = []
        for path, leaf in zip(_paths(tree), leaves, strict=True):
            if _is_tensor_argument(path, leaf):
                self.tensors.append(leaf)
                self.paths.append(path)
                template.append(_SLOT)
            else:
                template.append(leaf)
        self.template = tf.nest.pack_sequence_as(tree, template)
        self.specs = tuple(_spec(t) for t in self.tensors)
        self.key = (_structure_key(self.template), self.specs)
        self.without_values = [path for path, t in zip(self.paths, self.tensors, strict=True)
                               if isinstance(t, tf.TensorSpec)]

    def require_values(self, name, what):
        """Raise ``TypeError`` if a tensor argument is a ``tf.TensorSpec``: ``what``
        (e.g. "run") computes with the values."""
        if self.without_values:
            path = self.without_values[0]
            spec = self.specs[self.paths.index(path)]
            raise TypeError(
                f"{name}: {path} is {spec}, which has no values; {what} computes with "
                f"them. Fix: pass a tensor of that shape and dtype (a TensorSpec is for "
                f"lower, compile and report, which only compile the step)."
            )

    def bind(self, tensors):
        """``(args, kwargs)`` with the tensor slots filled from ``tensors`` in order."""
        it = iter(tensors)
        leaves = [next(it) if x is _SLOT else x for x in tf.nest.flatten(self.template)]
        args, kwargs = tf.nest.pack_sequence_as(self.template, leaves)
        return args, kwargs


def _is_tensor_argument(path, leaf):
    """Whether ``leaf`` (at ``path``) is passed to the program as a tensor; a variable of
    a strategy's scope is passed as it is, as ``TPUStrategy.run`` passes it, and the
    step captures it. Raises ``TypeError`` for what a program cannot take."""
    if isinstance(leaf, tf.Variable):
        if isinstance(leaf, tf.distribute.DistributedValues):
            return False
        raise TypeError(
            f"{path} is a tf.Variable; the emulator reads variables the step "
            f"function uses directly (closure or attribute). Fix: do not pass "
            f"variables as arguments; pass tensors, or leave the variable in scope."
        )
    if isinstance(leaf, (tf.SparseTensor, tf.RaggedTensor)):
        raise TypeError(
            f"{path} is a {type(leaf).__name__}; XLA programs take dense tensors. "
            f"Fix: densify it (tf.sparse.to_dense / .to_tensor()) before the step."
        )
    return tf.is_tensor(leaf) or isinstance(leaf, (np.ndarray, tf.TensorSpec))


def leaf_paths(tree, root):
    """Readable paths of every leaf of ``tree`` in ``tf.nest`` order: ``root['a'][0]``..."""
    return [path for path, _ in flatten_with_paths(tree, root, pair_names=False)]


def _paths(tree):
    return leaf_paths(tree[0], "args") + leaf_paths(tree[1], "kwargs")


def _spec(t):
    if isinstance(t, tf.TensorSpec):
        return tf.TensorSpec(t.shape, t.dtype)  # without its name, as for a tensor
    if isinstance(t, np.ndarray):
        return tf.TensorSpec(t.shape, tf.as_dtype(t.dtype))
    return tf.TensorSpec(t.shape, t.dtype)


def _structure_key(x):
    if isinstance(x, collections.abc.Mapping):
        return (type(x), tuple((k, _structure_key(x[k])) for k in sorted(x)))
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(_structure_key(v) for v in x))
    if x is _SLOT:
        return "<tensor>"
    if isinstance(x, tf.Variable):  # a distributed variable: the same one, not an equal one
        return ("<variable>", id(x))
    try:
        hash(x)
    except TypeError:
        return ("<object>", id(x))
    return (type(x), x)


class Outline:
    """What tracing ``fn`` as a TensorFlow graph tells, before XLA compiles it: the output
    structure and specs (sizes may be unknown), the captured values and the ``tf.summary``
    calls. ``outline`` returns one; ``Traced`` adds the XLA program.

    Attributes:
      name: the function's name, for messages.
      signature: the ``CallSignature`` it was traced for.
      arg_specs: the tensor arguments, in program parameter order.
      captures: what follows them: ``tf.Variable`` s and constant ``np.ndarray`` s.
      output_specs: the function's tensor outputs, then the results the host reads to
        write its summaries.
      summaries: those results, in pairs (``writes.ResultPair``): the last
        ``2 * len(summaries)`` outputs; ``writes.write`` writes the step's
        ``tf.summary`` calls from them. Empty for a step without summaries.
      graph: the traced ``FuncGraph``; its ops keep the Python line that made them.
    """

    def __init__(self, name, signature, concrete, captures, cut=None):
        self.name = name
        self.signature = signature
        self.arg_specs = signature.specs
        self.summaries = writes.pairs(cut) if cut is not None else ()
        self.structured_outputs = concrete.structured_outputs
        for path, leaf in zip(leaf_paths(self.structured_outputs, "outputs"),
                              tf.nest.flatten(self.structured_outputs), strict=True):
            if tf.is_tensor(leaf) and not isinstance(leaf, tf.Tensor):
                raise TypeError(
                    f"{name}: {path} is a {type(leaf).__name__}; an XLA program returns "
                    f"dense tensors. Fix: return .to_tensor() / tf.sparse.to_dense(...) of it."
                )
        self.captures = captures
        self.graph = concrete.graph  # each op with its Python traceback, for messages
        self.output_specs = tuple(tf.TensorSpec(t.shape, t.dtype) for t in concrete.outputs)
        if cut is not None:
            self.output_specs += tuple(cut.transfers)

    @property
    def variables(self):
        """The captured variables, in parameter order."""
        return [c for c in self.captures if is_variable(c)]

    def capture_values(self):
        """Current values of the captures (variables read now), as NumPy arrays."""
        return [c.numpy() if is_variable(c) else c for c in self.captures]

    def output_paths(self):
        """Paths of the function's tensor outputs, e.g. ``outputs['loss']``."""
        leaves = tf.nest.flatten(self.structured_outputs)
        paths = leaf_paths(self.structured_outputs, "outputs")
        return [p for p, x in zip(paths, leaves, strict=True) if tf.is_tensor(x)]

    def pack_outputs(self, flat):
        """The function's output structure with its tensors taken from ``flat`` in order."""
        it = iter(flat)
        leaves = [
            next(it) if tf.is_tensor(x) else x
            for x in tf.nest.flatten(self.structured_outputs)
        ]
        return tf.nest.pack_sequence_as(self.structured_outputs, leaves)


class Traced(Outline):
    """One step function traced and lowered to XLA for one call signature; see ``trace``.

    Besides ``Outline`` 's attributes:
      writes: ``(result_index, capture_index)`` for each variable the program updates.
      output_indices: result indices holding the function's own tensor outputs.
      result_shapes: the shape of every program result.
      module: the ``HloModuleProto``; ``hlo``: the same, serialized.
    """

    def __init__(self, name, signature, concrete, hlo, captures, cut=None):
        super().__init__(name, signature, concrete, captures, cut)
        self.hlo = hlo
        self.module = hlo_pb2.HloModuleProto.FromString(hlo)
        self._check_parameters()
        self.result_shapes = _result_shapes(self.module)
        self.parameter_types = [
            (tuple(p.dimensions), _NUMPY_TYPES.get(p.element_type))
            for p in self.module.host_program_shape.parameters
        ]
        num_args = len(self.arg_specs)
        self.writes = tuple(
            # an empty index: the program's single result is the written value
            (entry.output_shape_index[0] if entry.output_shape_index else 0,
             entry.parameter_number - num_args)
            for entry in self.module.input_output_alias.entries
        )
        written = {r for r, _ in self.writes}
        self.output_indices = tuple(i for i in range(len(self.result_shapes)) if i not in written)
        if len(self.output_indices) != len(self.output_specs) or any(
            not is_variable(self.captures[c]) for _, c in self.writes
        ):
            raise RuntimeError(
                f"{name}: the compiled program has {len(self.result_shapes)} results and "
                f"{len(self.writes)} variable writes, which does not match the function's "
                f"{len(self.output_specs)} outputs; this TensorFlow version lays out XLA "
                f"programs differently from the one spatial_tf supports (2.16 to 2.21)."
            )

    @property
    def written_variables(self):
        """The variables the program updates, in result order."""
        return [self.captures[c] for _, c in self.writes]

    def _check_parameters(self):
        expected = len(self.arg_specs) + len(self.captures)
        got = len(self.module.host_program_shape.parameters)
        if got != expected:
            raise RuntimeError(
                f"{self.name}: the compiled program takes {got} parameters but the call "
                f"has {len(self.arg_specs)} tensor arguments and {len(self.captures)} "
                f"captured values; this TensorFlow version lays out XLA programs "
                f"differently from the one spatial_tf supports (2.16 to 2.21)."
            )


_NUMPY_TYPES = {
    xla_data_pb2.PRED: "bool", xla_data_pb2.S8: "int8", xla_data_pb2.S16: "int16",
    xla_data_pb2.S32: "int32", xla_data_pb2.S64: "int64", xla_data_pb2.U8: "uint8",
    xla_data_pb2.U16: "uint16", xla_data_pb2.U32: "uint32", xla_data_pb2.U64: "uint64",
    xla_data_pb2.F16: "float16", xla_data_pb2.BF16: "bfloat16", xla_data_pb2.F32: "float32",
    xla_data_pb2.F64: "float64", xla_data_pb2.C64: "complex64", xla_data_pb2.C128: "complex128",
}


def _captures(name, captured, variables):
    """The values behind the ``captured`` inputs of a traced step: ``variables`` (or
    ``HandleVariable`` s for handles of others) and constants as NumPy arrays."""
    by_handle = {id(v.handle): v for v in variables}
    for t in captured:
        if t.dtype == tf.resource:
            var = by_handle.get(id(t))
            if var is None:
                var = HandleVariable.from_handle(t)
            if var is None:
                raise TypeError(
                    f"{name}: the step function uses a TensorFlow resource that is not a "
                    f"variable ({t!r}), such as a lookup table or an iterator; XLA cannot "
                    f"take it as input. Fix: use it outside the step function and pass "
                    f"the resulting tensors as arguments."
                )
            yield var
        elif isinstance(t, tf.Tensor) and hasattr(t, "numpy"):
            yield t.numpy()
        else:
            raise TypeError(
                f"{name}: the step function uses the tensor {t!r} from an enclosing "
                f"tf.function; the emulator compiles the step on its own and cannot see "
                f"it. Fix: pass it to strategy.run through args."
            )


def _result_shapes(module):
    result = module.host_program_shape.result
    if result.element_type == xla_data_pb2.TUPLE:  # empty when the step has no result
        return [tuple(s.dimensions) for s in result.tuple_shapes]
    shapes = [result]
    return [tuple(s.dimensions) for s in shapes]


def outline(fn, args=(), kwargs=None, *, signature=None, context=None):
    """Trace ``fn(*args, **kwargs)`` as a TensorFlow graph only and return an ``Outline``.

    Sizes may be unknown (``None``): nothing is compiled. ``signature`` and ``context``
    as for ``trace``.

    >>> @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    ... def outer(x):  # x has an unknown batch size while outer is traced
    ...     print(outline(lambda x: {"y": x * 2.0}, (x,)).output_specs)
    ...     return x
    >>> _ = outer.get_concrete_function()
    (TensorSpec(shape=(None, 3), dtype=tf.float32, name=None),)
    """
    signature = signature or CallSignature(args, kwargs)
    name, _, concrete, cut = _graph(fn, signature, context)
    captured = concrete.captured_inputs if cut is None else list(cut.captures.values())
    return Outline(name, signature, concrete,
                   tuple(_captures(name, captured, concrete.variables)), cut)


def _graph(fn, signature, context):
    """``fn`` wrapped as the program's function and traced for ``signature``:
    ``(name, jit_function, concrete_function, cut)``, where ``cut`` is the
    ``parts.Split`` of its ``tf.summary`` calls, None if it makes none."""
    name = function_name(fn)
    python_fn = getattr(fn, "python_function", fn)

    deferred: list = []  # the record_if condition is left to where the step runs

    def step(*tensors):
        call_args, call_kwargs = signature.bind(tensors)
        with context() if context is not None else contextlib.nullcontext(), \
                writes.default_writer(deferred):
            return python_fn(*call_args, **call_kwargs)

    step.__name__ = getattr(python_fn, "__name__", "step").replace("<", "").replace(">", "")
    jit = tf.function(step, jit_compile=True)
    concrete = jit.get_concrete_function(*signature.specs)
    cut = graph.split(concrete.graph, concrete.outputs, writes.tracing_writer_handle,
                      writes.HOST_STEP, arguments=len(signature.specs), name=name)
    if cut is not None:
        cut.outer_condition = bool(deferred)
    return name, jit, concrete, cut


def trace(fn, args=(), kwargs=None, *, signature=None, context=None):
    """Trace ``fn(*args, **kwargs)`` with XLA and return a ``Traced``.

    Works eagerly and while an outer ``tf.function`` is being traced; the step becomes a
    function of its own, so it may capture variables and eager tensors but not tensors of
    the outer graph. Shapes must be fully known (``outline`` takes unknown sizes).
    ``signature`` (a ``CallSignature`` of the same call) saves splitting the arguments
    again. ``context``, if given, is called inside the traced function and its result
    entered around ``fn`` (the emulator's replica context). ``tf.summary`` calls in
    ``fn`` are cut out of the program and their inputs returned after its outputs
    (``summaries``).

    Raises:
      ValueError: a tensor argument has an unknown size.
      TypeError: the step captures an outer-graph tensor or a non-variable resource.
      CompileError: an op cannot be compiled by XLA (no kernel, data-dependent shape).
    """
    signature = signature or CallSignature(args, kwargs)
    name = function_name(fn)
    for path, spec in zip(signature.paths, signature.specs, strict=True):
        if not spec.shape.is_fully_defined():
            raise ValueError(
                f"{name}: {path} has shape {spec.shape}, with sizes unknown until run "
                f"time; XLA compiles for fixed shapes. Fix: give it a static shape "
                f"(dataset.batch(n, drop_remainder=True), set_shape()), or call the step "
                f"through strategy.run, which compiles it for each size it meets."
            )
    name, jit, concrete, cut = _graph(fn, signature, context)
    program = jit
    if cut is not None:  # the step without its summary ops, which XLA cannot compile
        program = cut.program(len(signature.specs))
    captured = program.get_concrete_function(*signature.specs).captured_inputs
    captures = tuple(_captures(name, captured, concrete.variables))
    try:
        hlo = program.experimental_get_compiler_ir(*signature.specs)(stage="hlo_serialized")
    except (ValueError, tf.errors.OpError) as e:
        explained = errors.from_tensorflow_error(name, e)
        if explained is None:
            raise
        raise host_ops.explain(explained, concrete.graph) from e
    traced = Traced(name, signature, concrete, hlo, captures, cut)
    dynamic = errors.dynamic_shape_error(name, traced.module)
    if dynamic is not None:
        raise dynamic
    return traced
