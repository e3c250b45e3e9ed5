"""Argument checks shared by every public entry point.

One message template everywhere: ``"<name> must be <what>; got <name>=<value!r>"``. ``bool`` is
refused where an int is meant (``True`` is an ``int`` in Python, and a flag passed in the wrong
position must not silently become a batch size of 1).
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping, Sequence
from typing import NoReturn

import numpy as np
import numpy.typing as npt

__all__ = [
    "as_field",
    "check_bool",
    "check_choice",
    "check_index_array",
    "check_int",
    "check_int_array",
    "check_optional_int",
    "check_sequence",
    "fail",
    "is_zero_d",
]


def fail(name: str, what: str, value: object, exc: type[Exception] = ValueError) -> NoReturn:
    """Raise ``exc`` with the library's one message template."""
    raise exc(f"{name} must be {what}; got {name}={value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(
    name: str,
    value: object,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
) -> int:
    """Return ``value`` as a Python int, or raise naming ``name`` and the value.

    TypeError for a non-integer (including ``bool`` and floats such as ``2.0``); ValueError for an
    integer outside ``[min_value, max_value]``. numpy integers are accepted and converted.
    """
    if type(value) is int:  # the common case, checked without the ABC machinery
        if (min_value is None or value >= min_value) and (max_value is None or value <= max_value):
            return value
        fail(name, _int_range(min_value, max_value), value)
    if not _is_int(value):
        fail(name, _int_range(min_value, max_value), value, TypeError)
    result: int = int(value)  # type: ignore[call-overload]
    if (min_value is not None and result < min_value) or (
        max_value is not None and result > max_value
    ):
        fail(name, _int_range(min_value, max_value), value)
    return result


def _int_range(min_value: int | None, max_value: int | None) -> str:
    """What :func:`check_int` asks for, in words."""
    if min_value == 1 and max_value is None:
        return "a positive int"
    if min_value == 0 and max_value is None:
        return "a non-negative int"
    if min_value is not None and max_value is not None:
        return f"an int in [{min_value}, {max_value}]"
    if min_value is not None:
        return f"an int >= {min_value}"
    if max_value is not None:
        return f"an int <= {max_value}"
    return "an int"


def check_optional_int(name: str, value: object, *, min_value: int | None = None) -> int | None:
    """Like :func:`check_int`, but ``None`` passes through."""
    if value is None:
        return None
    return check_int(name, value, min_value=min_value)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (numpy bools included), else raise TypeError."""
    if isinstance(value, bool):
        return value
    if type(value).__name__ == "bool_":  # numpy.bool_ without importing numpy here
        return bool(value)
    fail(name, "a bool", value, TypeError)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``; the error lists them."""
    if not isinstance(value, str) or value not in choices:
        fail(name, "one of " + ", ".join(repr(c) for c in choices), value)
    return value


def is_zero_d(value: object) -> bool:
    """Whether ``value`` is a 0-d numpy array: it has ``__len__`` and ``__iter__`` but both
    raise, so a sequence check must refuse it before iterating."""
    return isinstance(value, np.ndarray) and value.ndim == 0


def check_sequence(name: str, value: object, what: str) -> list[object]:
    """Return the items of ``value`` as a list, or raise TypeError naming ``name``.

    Accepts sequences and numpy arrays of at least one dimension (the items of a 2-D array are
    its rows); refuses ``str``, ``bytes``, anything else that is not a sequence, and 0-d arrays
    (numpy's own "iteration over a 0-d array" names no argument).

    Args:
        name: The argument's name in the message.
        value: The argument.
        what: What it must be, e.g. ``"a sequence of positive ints, one per source"``.
    """
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, Sequence | np.ndarray)
        or is_zero_d(value)
    ):
        fail(name, what, value, TypeError)
    return list(value)


def check_int_array(
    name: str, values: object, *, min_value: int, max_value: int
) -> npt.NDArray[np.int64]:
    """Return ``values`` as a 1-D int64 array, or raise naming ``name`` (or ``name[i]``).

    Accepts numpy integer arrays and sequences of ints (numpy ints included); refuses floats,
    bools, ``None`` and NaN elements (TypeError, naming the first), values outside ``[min_value,
    max_value]`` (ValueError, naming the first) and anything that is not 1-D.
    """
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu" and values.ndim == 1:
        arr = values
    else:
        if isinstance(values, str | bytes) or not hasattr(values, "__len__") or is_zero_d(values):
            fail(name, "a 1-D sequence of ints", values, TypeError)
        items = list(values)  # type: ignore[call-overload]
        for i, v in enumerate(items):
            if not _is_int(v):
                fail(f"{name}[{i}]", f"an int in [{min_value}, {max_value}]", v, TypeError)
        too = [i for i, v in enumerate(items) if not min_value <= int(v) <= max_value]
        if too:
            i = too[0]
            fail(f"{name}[{i}]", f"an int in [{min_value}, {max_value}]", items[i])
        arr = np.array([int(v) for v in items], dtype=np.int64)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < min_value or hi > max_value:
            i = int(np.flatnonzero((arr < min_value) | (arr > max_value))[0])
            fail(f"{name}[{i}]", f"an int in [{min_value}, {max_value}]", int(arr[i]))
    return arr.astype(np.int64, copy=False)


def check_index_array(name: str, values: object, size: int, what: str) -> npt.NDArray[np.int64]:
    """Return ``values`` as an int64 array of indices in ``[0, size)``, its shape kept.

    An empty array passes whatever its dtype (``np.asarray([])`` is float64).

    Args:
        name: The argument's name in the message.
        values: An integer array or anything ``np.asarray`` makes one of, any shape.
        size: How many things there are to index.
        what: What each value must be, e.g. ``"document indices"``; the range is appended.

    Raises:
        TypeError: If ``values`` is not of an integer dtype (bools, floats and strings
            included: ``0.9`` must not silently become index 0).
        ValueError: Naming the first value outside ``[0, size - 1]``. Unsigned values are
            compared before the cast, so ``2**64 - 1`` does not wrap to ``-1``.
    """
    arr = np.asarray(values)
    if not arr.size:
        return np.zeros(arr.shape, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        fail(name, "integers", f"<array of dtype {arr.dtype}>", TypeError)
    if int(arr.min()) < 0 or int(arr.max()) >= size:
        flat = arr.reshape(-1)
        bad = (
            flat[(flat < 0) | (flat >= size)][0] if arr.dtype.kind == "i" else flat[flat >= size][0]
        )
        fail(name, f"{what} in [0, {size - 1}]", int(bad))
    return arr.astype(np.int64, copy=False)


_TEMPLATE_NAME = re.compile(r"([A-Za-z_]\w*)((?:\[[^\]]*\])*) must be ")


def as_field(error: Exception, fields: Mapping[str, str]) -> Exception:
    """``error`` with the argument it names shown as the field it came from, else ``error``.

    An object rebuilt from a saved config (``from_config``) checks its arguments as its
    constructor does, so a bad field would be reported as an argument: ``max_pixels must be
    ...; got max_pixels=...``. With ``fields={"max_pixels": "config['max_pixels']"}`` the
    message names what was edited, index suffixes kept (``resolutions[0]`` becomes
    ``config['resolutions'][0]``). Only a plain TypeError or ValueError whose message follows
    the template and names an argument of ``fields`` is rewritten; anything else comes back
    unchanged, so one ``except`` around the rebuild relabels every check without repeating it.

    Example:
        >>> as_field(ValueError("a[0] must be an int; got a[0]='x'"), {"a": "config['a']"})
        ValueError("config['a'][0] must be an int; got config['a'][0]='x'")
    """
    if type(error) not in (TypeError, ValueError):
        return error
    text = str(error)
    match = _TEMPLATE_NAME.match(text)
    if match is None or match.group(1) not in fields:
        return error
    old = match.group(1) + match.group(2)
    new = fields[match.group(1)] + match.group(2)
    head, got, value = text[len(old) :].rpartition(f"; got {old}=")
    rest = head + f"; got {new}=" + value if got else value
    return type(error)(new + rest)
