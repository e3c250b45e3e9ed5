"""Corpus changes in a mixture log: a source grown, retired or added (NOTE [ Corpus changes ]).

:class:`CorpusLog` adds to a log's entries (:class:`~dataorder.llm.mixlog_entries.EntryLog`) the
entries that change the corpus, their checks and the sizes they leave; the public class is
:class:`~dataorder.llm.mixlog.MixtureLog`. A blend over a log with corpus changes reads document
``i`` of source ``d`` at the flat index ``d * SOURCE_STRIDE + i`` (:func:`split_index`,
:class:`SourceDatasets`), so no growth or addition moves another document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dataorder._validate import check_int, fail
from dataorder.core.apportion import MAX_TOTAL, quantize_weights
from dataorder.llm.mixlog_entries import (
    OP_ADD,
    OP_GROW,
    OP_RETIRE,
    SOURCE_STRIDE,
    EntryLog,
    LogEntry,
)

__all__ = ["CorpusLog", "SourceDatasets", "split_index"]


class CorpusLog(EntryLog):
    """A log's corpus changes; see :class:`~dataorder.llm.mixlog.MixtureLog`, the class to use."""

    __slots__ = ()

    def _check_empty(self, name: str, units: Sequence[int]) -> None:
        """A source of size 0 (not added yet) or retired must have weight 0."""
        if self._sizes0 is None:
            return
        for d, u in enumerate(units):
            if u and (self._sizes[d] == 0 or d in self._retired):
                what = "retired" if d in self._retired else "of size 0 (not added yet)"
                fail(f"{name}[{d}]", f"0: source {d} is {what}", units[d] / MAX_TOTAL)

    # -- corpus changes (NOTE [ Corpus changes ]) -------------------------------------------------
    def _check_source(self, source: int) -> int:
        if self._sizes0 is None:
            fail(
                "log",
                "a MixtureLog built with sizes= (corpus changes need the sources' sizes)",
                "MixtureLog without sizes",
            )
        source = check_int("source", source, min_value=0, max_value=self._k - 1)
        if source in self._retired:
            fail("source", "a source not retired", source)
        return source

    def grow(self, step: int, source: int, size: int) -> None:
        """Source ``source`` has ``size`` documents from global batch ``step`` on (documents
        appended: its old ones keep their indices). The weights do not change.

        The rest of the source's pass under way reads every document it has not read, old and
        new, once (NOTE [ Corpus changes ]); later passes read all ``size`` documents.

        Raises:
            ValueError: If the log has no sizes, the step is refused (as in
                :meth:`set_weights`), the source is retired or empty, or ``size`` is not larger
                than its size.
        """
        step = self._check_step(step)
        source = self._check_source(source)
        old = self._sizes[source]
        if old == 0:
            fail("source", "a source of positive size (add_source adds an empty one)", source)
        size = check_int("size", size, min_value=old + 1, max_value=SOURCE_STRIDE)
        self._append(step, self._row(self._n - 1).copy(), OP_GROW, source, size)

    def retire(self, step: int, source: int) -> None:
        """Source ``source`` draws nothing new from global batch ``step`` on: its weight becomes
        0 (the others renormalised), and stays 0. It is still given the few samples it is owed
        (at most its deviation bound; NOTE [ Mixture log exactness ]), which continue its pass;
        the documents of its pass it never reads are counted
        (:meth:`~dataorder.llm.blend.BlendedSampler.retired_unread`).

        Raises:
            ValueError: If the log has no sizes, the step is refused, the source is retired or
                empty, or it is the only one with a positive weight.
        """
        step = self._check_step(step)
        source = self._check_source(source)
        if self._sizes[source] == 0:
            fail("source", "a source that was added (it has size 0)", source)
        units = self._row(self._n - 1).tolist()
        units[source] = 0
        if not any(units):
            fail("source", "a source other than the only one with a positive weight", source)
        self._append(step, quantize_weights(units), OP_RETIRE, source, -1)

    def add_source(self, step: int, source: int, size: int, weights: Sequence[Any]) -> None:
        """Add source ``source`` with ``size`` documents, drawing with ``weights`` from global
        batch ``step`` on. It starts a pass of its own.

        A source to be added is declared when the log is built, with size 0 (``sizes``) and
        weight 0: the tree over the sources (NOTE [ Mixture log exactness ]) stays fixed, so
        the bound holds across the addition, and the source's integral starts at this entry.

        Raises:
            ValueError: If the log has no sizes, the step is refused, the source was added or
                retired already, ``size`` is not positive, or the weights are malformed.
        """
        step = self._check_step(step)
        source = self._check_source(source)
        if self._sizes[source] != 0:
            fail("source", "a source declared with size 0 and not added yet", source)
        size = check_int("size", size, min_value=1, max_value=SOURCE_STRIDE)
        units = self._quantise("weights", weights, self._k)
        self._sizes[source] = size
        try:
            self._check_empty("weights", units)
        finally:
            self._sizes[source] = 0
        self._append(step, units, OP_ADD, source, size)

    @property
    def sizes(self) -> tuple[int, ...] | None:
        """The sources' sizes when the log was built (None: a log without corpus changes)."""
        return self._sizes0

    @property
    def current_sizes(self) -> tuple[int, ...] | None:
        """The sources' sizes after every entry (None: a log without corpus changes)."""
        return None if self._sizes0 is None else tuple(self._sizes)

    @property
    def retired(self) -> frozenset[int]:
        """The sources retired by the log's entries."""
        return frozenset(self._retired)

    def corpus_changes(self) -> list[LogEntry]:
        """The log's corpus changes (grow, retire, add), in order."""
        return [self.entry(e[0]) for e in self._events]


def split_index(index: int) -> tuple[int, int]:
    """``(source, document)`` of a flat index of a blend over a log with corpus changes
    (``source * SOURCE_STRIDE + document``; NOTE [ Corpus changes ]).

    >>> split_index(2 * SOURCE_STRIDE + 7)
    (2, 7)
    """
    index = check_int("index", index, min_value=0, max_value=2**63 - 1)
    return divmod(index, SOURCE_STRIDE)


class SourceDatasets:
    """The dataset to read a blend over a log with corpus changes: ``sources[d][i]`` at flat
    index ``d * SOURCE_STRIDE + i``, so documents appended to a source (a growth) or a source
    added later never move another document's index, as ``ConcatDataset``'s offsets would.

    Args:
        sources: One indexable per source (a list, a map-style dataset); a source may grow in
            place (documents appended) or start empty and be filled when it is added.

    Example:
        >>> data = SourceDatasets([["a0", "a1"], []])
        >>> data[1]
        'a1'
        >>> data.sources[1].append("b0")
        >>> data[SOURCE_STRIDE + 0]
        'b0'
    """

    def __init__(self, sources: Sequence[Any]) -> None:
        if isinstance(sources, str | bytes) or not isinstance(sources, Sequence):
            fail("sources", "a sequence of indexable datasets, one per source", sources, TypeError)
        self.sources = list(sources)

    def __getitem__(self, index: int) -> Any:
        source, document = split_index(index)
        if source >= len(self.sources):
            fail("index", f"a source below {len(self.sources)} (source {source})", index)
        return self.sources[source][document]
