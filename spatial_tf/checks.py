"""Argument checks shared across the package, with messages in one form.

>>> check_int(4, "num_replicas", "num_replicas=2")
4
>>> check_int(0, "num_replicas", "num_replicas=2")
Traceback (most recent call last):
...
ValueError: num_replicas is 0; expected a positive int. Fix: e.g. num_replicas=2.
"""
import dataclasses
import numbers
import warnings
from typing import Any, Dict, Optional, Tuple

from spatial_tf.table import plural

__all__ = ["check_int", "CORE_COUNTS", "is_power_of_two", "fold_keywords"]

# cores per replica TPUConfig and spatial_tf accept (spatial_tf.spec's rule, without TF)
CORE_COUNTS = tuple(2**i for i in range(8))


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, 8, ...: the form of every valid core count, whatever
    the limit (``CORE_COUNTS`` adds TPUConfig's 128).

    >>> [n for n in range(-1, 10) if is_power_of_two(n)]
    [1, 2, 4, 8]
    """
    return n >= 1 and not n & (n - 1)


def check_int(value: Any, name: str, example: str, *, minimum: Optional[int] = 1,
              expected: Optional[str] = None, where: Optional[str] = None,
              as_argument: bool = False) -> int:
    """``value`` as an int ``>= minimum``, or a ``TypeError`` / ``ValueError`` naming it.

    ``name``: the argument as the user wrote it; ``example``: a correct call for the fix;
    ``expected``: what a valid value is, in words (default: "a positive int" or "an int
    >= minimum"); ``where``: an optional prefix (the function or slice it belongs to).
    ``minimum=None`` checks the type only; ``as_argument`` shows ``name=value`` rather
    than ``name is value``.
    """
    head = f"{where}: " if where else ""
    shown = (lambda v: f"{name}={v}") if as_argument else (lambda v: f"{name} is {v}")
    if expected is None:
        expected = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{head}{shown(repr(value))} ({type(value).__name__}); expected {expected}. "
            f"Fix: e.g. {example}."
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{head}{shown(value)}; expected {expected}. Fix: e.g. {example}.")
    return int(value)


def fold_keywords(where: str, keywords: Dict[str, Any],
                  targets: Dict[str, Tuple[type, Any]]) -> Dict[str, Any]:
    """Fold the keyword arguments of an earlier release into the options objects that now
    take them; each moved keyword warns (``DeprecationWarning``) naming its new place.

    ``targets``: ``{argument name: (dataclass, the instance given or None)}``. Returns
    the instances updated (``dataclass()`` where None was given); a keyword no dataclass
    has raises ``TypeError``.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Options:
    ...     workers: int = 1
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     folded = fold_keywords("plan", {"workers": 2}, {"options": (Options, None)})
    >>> folded, str(caught[0].message)
    ({'options': Options(workers=2)}, 'plan(..., workers=2) is deprecated; pass options=Options(workers=2).')
    """
    instances = {arg: given if given is not None else cls() for arg, (cls, given) in
                 targets.items()}
    fields = {arg: {f.name for f in dataclasses.fields(cls)} for arg, (cls, _) in
              targets.items()}
    unknown = sorted(k for k in keywords if not any(k in f for f in fields.values()))
    if unknown:
        accepted = " or ".join(f"{targets[arg][0].__name__} ({', '.join(sorted(f))})"
                               for arg, f in fields.items())
        calls = ", ".join(f"{arg}={targets[arg][0].__name__}(...)" for arg in targets)
        raise TypeError(
            f"{where}: {plural(len(unknown), 'unexpected keyword argument')} "
            f"{', '.join(unknown)}; expected those of {accepted}. Fix: {where}(..., {calls}).")
    for arg, obj in instances.items():
        moved = {k: v for k, v in keywords.items() if k in fields[arg]}
        if moved:
            given = ", ".join(f"{k}={v!r}" for k, v in moved.items())
            warnings.warn(f"{where}(..., {given}) is deprecated; pass "
                          f"{arg}={targets[arg][0].__name__}({given}).", DeprecationWarning,
                          stacklevel=3)
            instances[arg] = dataclasses.replace(obj, **moved)
    return instances
