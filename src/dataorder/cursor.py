"""The cursor every dataorder sampler carries, and the epoch and state rules they share.

A sampler is configuration plus a cursor ``(epoch, progress)``, where progress is a few global
counters (e.g. ``consumed`` positions, or ``bucket`` and ``consumed`` for a bucket sampler). The
rules, identical for every sampler:

* ``iter(sampler)`` yields from the cursor to the end of the cursor's epoch and advances the cursor
  *before* each batch is handed out, so ``state_dict()`` always describes "after the batches
  produced so far" (what torchdata's StatefulDataLoader snapshots).
* A pass that runs to the end of its epoch moves the cursor to the start of the next epoch, so
  forgetting ``set_epoch`` never replays an epoch, and a state saved after the pass resumes there.
* ``set_epoch(e)``: the current epoch keeps its position; another epoch starts at its beginning.
* ``load_state_dict(sd)`` sets the cursor; the next ``iter()`` starts there. Nothing is replayed.
  It is strict and pure (see :mod:`dataorder.state`).
* A cursor *placed* by ``set_epoch`` or ``load_state_dict`` at the end of its epoch (a checkpoint
  taken after an epoch's last batch, before the loader noticed the end) gives an empty pass for
  that epoch, and the epoch after it comes next: the usual resumed loop
  ``for e in range(saved_epoch, E): sampler.set_epoch(e); ...`` stays aligned. A cursor that
  reached the end by iterating, in a loop that never exhausted its iterator, moves on at the
  next ``iter()`` instead.
* ``len(sampler)`` is the number of batches the next ``iter()`` yields.
* Only one live iterator at a time: a second ``iter()`` continues from the shared cursor.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from dataorder._validate import check_int
from dataorder.state import Scalar, build_state, parse_state

__all__ = ["CursorSampler"]

T_co = TypeVar("T_co", covariant=True)


class CursorSampler(abc.ABC, Generic[T_co]):
    """Base of every dataorder sampler: the cursor, the epoch rules and the state protocol.

    Subclasses define :attr:`state_kind`, :attr:`progress_keys`, :meth:`order_config`,
    :meth:`layout_info`, :meth:`_epoch_length`, :meth:`_remaining`, :meth:`_check_progress` and
    :meth:`_iterate`.
    """

    #: Name recorded as ``kind`` in the state.
    state_kind: ClassVar[str]
    #: Global progress counters, all starting at 0 each epoch.
    progress_keys: ClassVar[tuple[str, ...]] = ("consumed",)
    #: Whether a state written under another layout (data-parallel size) may be loaded.
    elastic: ClassVar[bool] = True

    def __init__(self) -> None:
        self._epoch = 0
        self._progress: dict[str, int] = dict.fromkeys(self.progress_keys, 0)
        # Whether set_epoch/load_state_dict put the cursor where it is (see the module docstring).
        # Never saved: it describes how this process got here, not where the job is.
        self._placed = False

    # -- what subclasses provide ----------------------------------------------------------------
    @abc.abstractmethod
    def order_config(self) -> dict[str, Scalar]:
        """Fields that determine the global order; a state must match them to load."""

    @abc.abstractmethod
    def layout_info(self) -> dict[str, int]:
        """Layout fields recorded in the state for inspection (and checked if not elastic).

        Never the rank: one state describes the whole job and loads on every rank.
        """

    @abc.abstractmethod
    def _epoch_length(self) -> int:
        """Batches this rank yields in a whole epoch."""

    @abc.abstractmethod
    def _remaining(self, progress: Mapping[str, int]) -> int:
        """Batches this rank yields from ``progress`` to the end of the epoch."""

    @abc.abstractmethod
    def _check_progress(self, epoch: int, progress: Mapping[str, int]) -> None:
        """Raise ValueError if this layout cannot continue from ``progress``."""

    @abc.abstractmethod
    def _iterate(self, epoch: int) -> Iterator[T_co]:
        """Yield from ``self._progress`` to the end of ``epoch``, updating it before each yield."""

    # -- shared behaviour -----------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The cursor's epoch."""
        return self._epoch

    @property
    def progress(self) -> dict[str, int]:
        """A copy of the cursor's global progress counters in the current epoch."""
        return dict(self._progress)

    def _reset_progress(self, progress: Mapping[str, int]) -> None:
        # In place: a live iterator writes its progress into this same dict, so a state loaded
        # (or restored, as verify_data_parallel does) while it is alive stays the one cursor.
        self._progress.clear()
        self._progress.update(progress)

    def _epoch_done(self) -> bool:
        return self._remaining(self._progress) == 0

    def cursor_snapshot(self) -> tuple[int, dict[str, int], bool]:
        """The whole cursor, for a reader that must put it back exactly (verify_data_parallel).

        Unlike :meth:`state_dict` it includes whether the cursor was placed (see the module
        docstring), so restoring it with :meth:`restore_cursor` changes nothing at all.
        """
        return self._epoch, dict(self._progress), self._placed

    def restore_cursor(self, snapshot: tuple[int, dict[str, int], bool]) -> None:
        """Put back a :meth:`cursor_snapshot` of this sampler (progress updated in place)."""
        epoch, progress, placed = snapshot
        self._epoch = epoch
        self._reset_progress(progress)
        self._placed = placed

    def _next_epoch(self) -> None:
        self._epoch += 1
        self._reset_progress(dict.fromkeys(self.progress_keys, 0))

    def set_epoch(self, epoch: int) -> None:
        """Move the cursor to ``epoch``: the current epoch keeps its position, another starts at 0.

        Raises:
            TypeError, ValueError: If ``epoch`` is not a non-negative int.
        """
        epoch = check_int("epoch", epoch, min_value=0)
        if epoch != self._epoch:
            self._epoch = epoch
            self._reset_progress(dict.fromkeys(self.progress_keys, 0))
        self._placed = True

    def __len__(self) -> int:
        """Number of batches the next ``iter()`` yields on this rank."""
        if self._epoch_done():
            return 0 if self._placed else self._epoch_length()
        return self._remaining(self._progress)

    def __iter__(self) -> Iterator[T_co]:
        if self._epoch_done() and not self._placed:
            self._next_epoch()
        return self._run_to_end(self._epoch)

    def _run_to_end(self, epoch: int) -> Iterator[T_co]:
        # Cleared when the pass starts, not at iter(): a DataLoader with workers calls iter()
        # twice and runs only the second iterator.
        self._placed = False
        yield from self._iterate(epoch)
        # The pass reached the end of its epoch (unless the cursor was moved meanwhile): the next
        # epoch starts here, so a state saved from now on resumes at its beginning.
        if self._epoch == epoch and self._epoch_done():
            self._next_epoch()

    def state_dict(self) -> dict[str, Scalar]:
        """Return the cursor as a flat, JSON-serialisable dict (see :mod:`dataorder.state`)."""
        return build_state(
            self.state_kind,
            epoch=self._epoch,
            config=self.order_config(),
            progress=self._progress,
            layout=self.layout_info(),
        )

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Set the cursor from ``state_dict``; the next ``iter()`` starts there.

        Raises:
            TypeError: If ``state_dict`` is not a mapping.
            ValueError: If it is not a dataorder state of this kind, comes from another
                configuration (the message names the field), or describes a position this layout
                cannot continue from. The sampler is unchanged when it raises.
        """
        layout = self.layout_info()
        epoch, progress, saved_layout = parse_state(
            state_dict,
            kind=self.state_kind,
            config=self.order_config(),
            progress_keys=self.progress_keys,
            layout_keys=tuple(layout),
        )
        if not self.elastic:
            for key, ours in layout.items():
                if saved_layout[key] != ours:
                    raise ValueError(
                        f"this sampler cannot resume on another layout: {key} is "
                        f"{saved_layout[key]} in the state but {ours} here"
                    )
        self._check_progress(epoch, progress)
        self._epoch = epoch
        self._reset_progress(progress)
        self._placed = True
