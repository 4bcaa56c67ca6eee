"""Checks of the models' option fields, with messages naming the options class and field.

>>> check_fraction(0.9, "UNetOptions", "norm_momentum", "e.g. norm_momentum=0.99")
0.9
>>> check_fraction(1.0, "UNetOptions", "norm_momentum", "e.g. norm_momentum=0.99")
Traceback (most recent call last):
...
ValueError: UNetOptions: norm_momentum is 1.0; expected a number in [0, 1). Fix: e.g. norm_momentum=0.99.
"""
import numbers
from typing import Any, Sequence, Tuple, Type, TypeVar

__all__ = ["check_fraction", "check_flag", "check_positive_number", "check_stage_ints",
           "check_options_type"]

T = TypeVar("T")


def check_fraction(value: Any, where: str, name: str, fix: str) -> Any:
    """``value`` if it is a number in ``[0, 1)`` (a momentum), else a ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not 0 <= float(value) < 1:
        raise ValueError(f"{where}: {name} is {value!r}; expected a number in [0, 1). "
                         f"Fix: {fix}.")
    return value


def check_positive_number(value: Any, where: str, name: str, fix: str) -> Any:
    """``value`` if it is a number ``> 0``, else a ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0:
        raise ValueError(f"{where}: {name} is {value!r}; expected a number > 0. Fix: {fix}.")
    return value


def check_flag(value: Any, where: str, name: str, fix: str) -> bool:
    """``value`` if it is True or False, else a ``TypeError``."""
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {name} is {value!r}; expected True or False. Fix: {fix}.")
    return value


def check_stage_ints(value: Any, where: str, name: str, example: Sequence[int]) -> Tuple[int, ...]:
    """``value`` as a tuple of one positive int per backbone stage (C2-C5), else a
    ``ValueError``."""
    try:
        values = tuple(value)
    except TypeError:
        values = ()
    if len(values) != len(example) or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) > 0
            for v in values):
        raise ValueError(
            f"{where}: {name} is {value!r}; expected {len(example)} positive ints, one per "
            f"backbone stage (C2-C5). Fix: e.g. {where}({name}={tuple(example)}).")
    return tuple(int(v) for v in values)


def check_options_type(value: Any, cls: Type[T], where: str, fix: str) -> None:
    """A ``TypeError`` unless ``value`` is None or a ``cls``."""
    if value is not None and not isinstance(value, cls):
        raise TypeError(f"{where}: options is {value!r} ({type(value).__name__}); expected a "
                        f"{cls.__name__} or None. Fix: {fix}.")
