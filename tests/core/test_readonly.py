"""ReadOnly: a one-line read-only property, typed and documented."""

from __future__ import annotations

import doctest
import inspect
from types import SimpleNamespace

import pytest

from dataorder.core import readonly
from dataorder.core.readonly import ReadOnly


class _Config:
    def __init__(self) -> None:
        self._n = 3
        self._end = SimpleNamespace(drop_last=True)

    n = ReadOnly[int]("_n", "How many.")
    drop_last = ReadOnly[bool]("_end.drop_last", "Whether the tail is dropped.")
    twice = ReadOnly[int](lambda c: c._n * 2, "Twice as many.")


def test_reads_an_attribute_a_dotted_path_or_a_function() -> None:
    c = _Config()
    assert (c.n, c.drop_last, c.twice) == (3, True, 6)
    c._n = 5
    assert (c.n, c.twice) == (5, 10)  # read when asked, never cached


def test_is_a_documented_property_that_refuses_assignment() -> None:
    for name, doc in (("n", "How many."), ("twice", "Twice as many.")):
        member = vars(_Config)[name]
        assert isinstance(member, property)  # docs/gen_api.py lists it as a property
        assert inspect.getdoc(member) == doc
    with pytest.raises(AttributeError):
        _Config().n = 4  # type: ignore[misc]


def test_module_example() -> None:
    result = doctest.testmod(readonly)
    assert result.attempted > 0
    assert result.failed == 0
