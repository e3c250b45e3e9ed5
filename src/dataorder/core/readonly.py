"""Read-only attributes declared in one line: a sampler's configuration, read back.

A sampler exposes what it was built with (``seed``, ``drop_last``, ``total_samples`` ...) as
read-only properties, most of them one attribute read. :class:`ReadOnly` declares one in a line,
typed and documented, so a class shows its configuration as a short table:

>>> class Corpus:
...     def __init__(self, n: int) -> None:
...         self._n = n
...     n = ReadOnly[int]("_n", "Documents in the corpus.")
...     half = ReadOnly[int](lambda c: c._n // 2, "Half of them, rounded down.")
>>> Corpus(5).n, Corpus(5).half, Corpus.n.__doc__
(5, 2, 'Documents in the corpus.')
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

__all__ = ["ReadOnly"]

T = TypeVar("T")
R = TypeVar("R", bound="ReadOnly[Any]")


class ReadOnly(property, Generic[T]):
    """A read-only property (a :class:`property`, so ``help()`` and the API page list it).

    Args:
        read: The attribute of the instance it returns (a dotted path reads through attributes:
            ``"_end.drop_last"``), or a function of the instance.
        doc: Its docstring.
    """

    def __init__(self, read: str | Callable[[Any], T], doc: str) -> None:
        super().__init__(operator.attrgetter(read) if isinstance(read, str) else read)
        self.__doc__ = doc  # a property subclass's instances would show the class's docstring

    @overload
    def __get__(self: R, instance: None, owner: type | None = None, /) -> R: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None, /) -> T: ...
    def __get__(self, instance: object, owner: type | None = None, /) -> Any:
        return super().__get__(instance, owner)
