"""The cursor every dataorder sampler carries, and the one epoch and iteration contract they share.

A sampler is configuration plus a cursor. The configuration fixes a pure function, the order:
:meth:`CursorSampler.epoch_plan` gives an :class:`EpochPlan` that answers, for any epoch, rank
and step, which batch that step holds, without iterating. The cursor says where this process is
in that order. Iteration, ``len()``, ``batch_at``, state saving and loading are written once,
here, over those two pieces.

NOTE [ The loop contract ]
    The cursor is ``(epoch, origin, position)``: ``origin`` is where passes over the epoch start
    in this process (0, or the position a state put it at), ``position`` is how far the latest
    pass has handed out batches. Only ``epoch`` and ``position`` are saved. A loop *owns the
    epoch* once it calls ``set_epoch`` (torch's convention, which Lightning, Accelerate and HF
    Trainer follow).

    ==============================  ==========================================================
    event                           effect
    ==============================  ==========================================================
    ``len(sampler)``                batches of a whole epoch on this rank, wherever the cursor
                                    is (torch's convention, which Lightning and NeMo rely on)
    ``sampler.remaining``           batches the next ``iter()`` yields
    a pass starts (first ``next``)  it runs from ``origin``; a pass already running goes on
                                    (a peek inside the loop, a validation loop over the same
                                    loader)
    each batch                      ``position`` advances *before* the batch is handed out, so
                                    ``state_dict()`` means "after the batches produced so far"
                                    by the pass that handed out the latest one
    the pass reaches the end        nothing moves: a state saved now still describes epoch
                                    ``e``, at its end
    the next pass after that        starts epoch ``e + 1`` (a forgotten ``set_epoch`` never
                                    repeats an epoch), unless a state was loaded into a loop
                                    that owns the epoch: then epoch ``e`` stays, and once a
                                    pass has run it out every further pass is empty, until
                                    ``set_epoch`` moves it
    an abandoned pass (a peek)      costs nothing: the next pass starts at ``origin`` again
    ``set_epoch(e)``, same epoch    ``position`` goes back to ``origin``; a running pass goes
                                    on (Lightning and Accelerate start the loader, and its
                                    workers, before they call ``set_epoch``)
    ``set_epoch(e)``, other epoch   the cursor is *placed* at ``e``'s start; a running pass
                                    stops
    ``load_state_dict(s)``          ``epoch`` and ``origin = position`` come from ``s``; the
                                    cursor is placed, and a running pass stops. Exception: a
                                    state of an earlier epoch, loaded after the loop said
                                    ``set_epoch(e)`` and before any batch, keeps ``e``'s start
                                    (a loader's state had not seen the new epoch yet), and
                                    every pass starts there until the cursor is placed again
                                    (torchdata's loader runs a restore pass of its own first);
                                    a warning counts the steps the state had left, if any
    ``load_state_dict(f)``, ``f``   placed where that library's own sampler continues: NeMo's
    another library's checkpoint    at its epoch and step, torchdata's in the cursor's epoch;
                                    never the exception above (their samplers take the
                                    state's epoch over the loop's)
    a copy (pickle, deepcopy)       is a saved state: it continues from the position
    live vs loaded                  a loaded position becomes the origin; a live pass's does
                                    not (a live sampler replays from its origin where a
                                    loaded one resumes): the only rule that separates them
    ==============================  ==========================================================

    So the usual loop ``for e in range(saved_epoch, E): sampler.set_epoch(e); for b in loader:
    ...``, saving ``{"epoch": e, "loader": loader.state_dict()}`` anywhere, including after the
    loop and after a loader read ahead to the end, is exact at every checkpoint: the resumed
    loop reads what is left of epoch ``e`` (possibly nothing), then epoch ``e + 1``.

    A loop that resumes at ``e + 1`` from a state saved after epoch ``e``'s loop (Accelerate's
    ``epoch_{e}`` folders, ``global_step // len(loader)``) is exact too, whichever of
    ``set_epoch`` and ``load_state_dict`` it calls first.

    What the sampler cannot see (docs/design.md lists them with the loops that meet them):

    * a loop that never calls ``set_epoch``, restored from a state taken after the loader ran
      out, with worker processes: torchdata's loader runs one pass of its own while restoring
      (it primes its workers), and that pass reads the next epoch;
    * a checkpoint taken after a peek and before the loop's next batch records the peek's
      position: the peeked batches count as read.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from types import MappingProxyType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from dataorder._validate import check_int, fail
from dataorder.core.runcount import RunCount
from dataorder.core.state import (
    MAX_EPOCH,
    Scalar,
    StateKey,
    build_state,
    check_extras,
    extra_values,
    parse_state,
    without_repeated_layout,
)

__all__ = ["CursorBatchSampler", "CursorSampler", "EpochPlan", "RunCount"]

T_co = TypeVar("T_co", covariant=True)

#: How many epoch plans a sampler keeps, least recently used first out: the cursor's epoch and
#: one more (the next epoch, or another layout's plan while a state is checked). A compat order
#: materialises a permutation per plan, so each one kept costs 8 bytes per sample.
_PLAN_CACHE = 2


class EpochPlan(Protocol[T_co]):
    """One epoch of a sampler's order, for one data-parallel layout: a pure function of steps.

    ``num_steps`` batches per rank; step ``k`` is the same global block on every rank, and each
    rank's batch of it is :meth:`batches`. Progress is global (it does not name a rank), so a
    state written on one layout is checked and continued on another through :meth:`step_of`.
    """

    @property
    def num_steps(self) -> int:
        """Batches every rank yields in the epoch."""
        ...

    @property
    def dp_size(self) -> int:
        """The number of data-parallel ranks this plan is cut for."""
        ...

    def step_of(self, progress: Mapping[str, int], *, strict: bool = False) -> int:
        """The step at which ``progress`` stands.

        ``strict=False``: where this layout continues from a global progress (possibly written
        by another layout). ``strict=True``: only progress this layout itself reaches.

        Raises:
            ValueError: If this layout cannot continue from (or, strictly, never reaches) it.
        """
        ...

    def progress_at(self, step: int) -> dict[str, int]:
        """Global progress after ``step`` steps."""
        ...

    def batches(self, rank: int, start: int, stop: int) -> Sequence[T_co]:
        """``rank``'s batches of steps ``start .. stop - 1``."""
        ...


class CursorSampler(abc.ABC, Generic[T_co]):
    """Base of every dataorder sampler: the cursor, the loop contract and the state protocol.

    Subclasses define :attr:`state_kind`, :attr:`progress_keys`, :meth:`order_config`,
    :meth:`layout_info`, :attr:`dp_rank` and :meth:`_make_plan`, and may declare the hooks
    below; everything else, iteration and the state, is here, and no sampler overrides it
    (NOTE [ The loop contract ] in the module docstring).

    NOTE [ The state path ]
        Every state is written by :meth:`_state_at` (``state_dict``, ``state_at``,
        ``state_after``): the declared fields, then the hooks' extra keys. Every state is read
        by :meth:`_located` (``load_state_dict``, ``state_position``, ``state_after``,
        ``from_state``): a foreign checkpoint through :meth:`_read_foreign`, else the extra keys
        set apart, the configuration and layout checked (:meth:`_checked_state`), then the
        extra keys. :meth:`_apply_state` places the cursor. The hooks only declare.
    """

    #: Name recorded as ``kind`` in the state.
    state_kind: ClassVar[str]
    #: Global progress counters, all starting at 0 each epoch.
    progress_keys: ClassVar[tuple[str, ...]] = ("consumed",)
    #: How a configuration field whose key is not its argument's name is named when a state
    #: differs in it (``parse_state``'s ``labels``).
    config_labels: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: What a step is called in :meth:`describe_progress` ("micro-steps", "indices").
    steps_label: ClassVar[str] = "steps"

    def __init__(self) -> None:
        self._epoch = 0
        self._origin: dict[str, int] = dict.fromkeys(self.progress_keys, 0)
        # Steps handed out by the pass that handed out the latest batch, or None if no pass
        # started since the cursor was placed (then the position is the origin). The progress
        # dict is derived when asked.
        self._step: int | None = None
        # How this process got here; never saved (NOTE [ The loop contract ]): whether the last
        # placement was a loaded state, whether the loop ever called set_epoch (then it owns the
        # epoch), and how many placements have stopped the passes running at the time.
        self._loaded = False
        self._loop_owns_epoch = False
        self._placements = 0
        self._restart = False  # every pass starts at the origin (the loop's epoch kept on load)
        self._plans: dict[tuple[int, tuple[tuple[str, int], ...]], EpochPlan[T_co]] = {}

    # -- what subclasses provide ----------------------------------------------------------------
    @property
    def elastic(self) -> bool:
        """Whether a state written under another layout (data-parallel size) may be loaded."""
        return True

    @abc.abstractmethod
    def order_config(self) -> dict[str, Scalar]:
        """Fields that determine the global order; a state must match them to load."""

    @abc.abstractmethod
    def layout_info(self) -> dict[str, int]:
        """The data-parallel layout, recorded in the state (never the rank).

        One state describes the whole job and loads on every rank. A layout with other values
        is what :meth:`epoch_plan` builds for ``layout=``; a non-elastic sampler refuses a state
        whose layout differs.
        """

    @property
    @abc.abstractmethod
    def dp_rank(self) -> int:
        """This process's data-parallel rank."""

    @abc.abstractmethod
    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> EpochPlan[T_co]:
        """Build the plan of ``epoch`` on ``layout`` (a dict like :meth:`layout_info`'s)."""

    def _run_count(self) -> RunCount | None:
        """How this sampler's epochs cut a run-wide count (NOTE [ The run-wide count ]); None
        for a sampler that takes no run-wide count."""
        return None

    def _extra_keys(self) -> tuple[Sequence[StateKey], Sequence[StateKey]]:
        """Keys the state adds: ``(right after the progress, at the end)``."""
        return (), ()

    def _layout_in_config(self) -> tuple[str, ...]:
        """Layout fields the configuration records instead of ``layout.*``."""
        return ()

    def _read_foreign(self, state: Mapping[str, Any]) -> tuple[int, dict[str, int]] | None:
        """Where another library's checkpoint (no ``format``) puts the cursor, or None."""
        return None

    def _describe_position(self, position: Mapping[str, int]) -> str | None:
        """Where the cursor is, in words; None: the plan's ``describe`` or the counters."""
        return None

    def _progress_details(self) -> list[tuple[str, str]]:
        """Further ``(label, text)`` lines of :meth:`describe_progress`."""
        return []

    def _chunk_steps(self) -> int:
        """Most steps evaluated together while iterating. A pass's first chunk is one step, then
        chunks double up to this, so a start or a resume costs one batch's work."""
        return 1024

    # -- the order ------------------------------------------------------------------------------
    def epoch_plan(
        self, epoch: int | None = None, *, layout: Mapping[str, int] | None = None
    ) -> EpochPlan[T_co]:
        """The :class:`EpochPlan` of ``epoch`` (default: the cursor's) on ``layout`` (default:
        this sampler's). Plans are cached; building one never moves the cursor."""
        e = (
            self._epoch
            if epoch is None
            else check_int("epoch", epoch, min_value=0, max_value=self.max_epoch)
        )
        lay = self.layout_info() if layout is None else dict(layout)
        key = (e, tuple(sorted(lay.items())))
        plan = self._plans.pop(key, None)
        if plan is None:
            plan = self._make_plan(e, lay)
            while len(self._plans) >= _PLAN_CACHE:
                self._plans.pop(next(iter(self._plans)))  # the least recently used
        self._plans[key] = plan  # (re)inserted last: the most recently used
        return plan

    def _plan_through(self, epoch: int, progress: Mapping[str, int] | None) -> EpochPlan[T_co]:
        """``epoch``'s plan through ``progress`` (None: its start): NOTE [ Counted positions ]."""
        return self.epoch_plan(epoch)

    @property
    def steps_per_epoch(self) -> int:
        """Batches this rank yields in a whole epoch (what ``len()`` returns)."""
        return self.epoch_plan().num_steps

    def batch_at(self, step: int, *, rank: int | None = None, epoch: int | None = None) -> T_co:
        """The batch that step ``step`` of ``epoch`` holds on ``rank``: random access to the order.

        Exactly what iteration yields at that step; the cursor does not move. ``rank`` defaults
        to this sampler's, ``epoch`` to the cursor's.

        Raises:
            ValueError: If ``step`` is not in ``[0, steps_per_epoch)`` or ``rank`` not in
                ``[0, data-parallel size)``.
        """
        plan = self.epoch_plan(epoch)
        step = check_int("step", step, min_value=0, max_value=plan.num_steps - 1)
        r = (
            self.dp_rank
            if rank is None
            else check_int("rank", rank, min_value=0, max_value=plan.dp_size - 1)
        )
        return plan.batches(r, step, step + 1)[0]

    # -- the cursor -----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The cursor's epoch."""
        return self._epoch

    @property
    def progress(self) -> dict[str, int]:
        """A copy of the cursor's global progress in its epoch (what ``state_dict`` saves)."""
        return self._position

    @property
    def _position(self) -> dict[str, int]:
        if self._step is None:
            return dict(self._origin)
        return self.epoch_plan().progress_at(self._step)

    def _at_end(self) -> bool:
        plan = self.epoch_plan()
        step = plan.step_of(self._origin) if self._step is None else self._step
        return step >= plan.num_steps

    def _place(
        self, epoch: int, origin: Mapping[str, int], *, loaded: bool = False, stop: bool = True
    ) -> None:
        self._epoch = epoch
        self._origin = dict(origin)
        self._step = None
        self._loaded = loaded
        self._restart = False
        if stop:
            self._placements += 1  # every running pass sees it and stops

    def _pinned(self) -> bool:
        """Whether the epoch is a loaded one the loop owns: only ``set_epoch`` moves it."""
        return self._loaded and self._loop_owns_epoch

    def _moves_on(self) -> bool:
        """Whether the next pass starts the next epoch (NOTE [ The loop contract ])."""
        if self._restart or self._pinned():
            return False
        return self._step is not None and self._at_end()

    def _start_step(self, plan: EpochPlan[T_co]) -> int:
        """Where the next pass over the cursor's epoch starts (``plan`` is that epoch's)."""
        if not self._restart and self._pinned() and self._step is not None and self._at_end():
            return plan.num_steps  # a pinned epoch already run out: further passes are empty
        return plan.step_of(self._origin)

    @property
    def max_epoch(self) -> int:
        """The largest epoch :meth:`set_epoch` and a state may name: ``MAX_EPOCH`` (2**32 - 1),
        unless a sampler's positions run out sooner (a blend counts samples over the run)."""
        return MAX_EPOCH

    def set_epoch(self, epoch: int) -> None:
        """Place the cursor at ``epoch``: its origin if it is the current epoch, else its start.

        Raises:
            TypeError, ValueError: If ``epoch`` is not a non-negative int.
        """
        epoch = check_int("epoch", epoch, min_value=0, max_value=self.max_epoch)
        self._loop_owns_epoch = True
        if epoch == self._epoch:
            # A running pass reads what a new one would: it goes on. Lightning and Accelerate
            # start the loader (and its workers' prefetch) before they call set_epoch.
            self._place(epoch, self._origin, stop=False)
        else:
            self._place(epoch, dict.fromkeys(self.progress_keys, 0))

    def __len__(self) -> int:
        """Batches of a whole epoch on this rank (torch's convention); see :attr:`remaining`."""
        return self.steps_per_epoch

    def next_start(self) -> tuple[int, int]:
        """``(epoch, step)`` where the next ``iter()`` starts; the cursor does not move."""
        if self._moves_on():
            return self._epoch + 1, 0
        return self._epoch, self._start_step(self.epoch_plan())

    def upcoming(self) -> tuple[int, int]:
        """``(epoch, step)`` of the next batch the job reads; the cursor does not move.

        Where the next ``iter()`` starts, unless that pass has nothing left (a state saved at an
        epoch's end): then the next epoch's first step, which the loop's next ``set_epoch``, or
        the pass after the empty one, reads (NOTE [ The loop contract ]). What ``dataorder
        inspect`` shows and what ``verify_data_parallel`` checks by default.
        """
        epoch, step = self.next_start()
        if step >= self.epoch_plan(epoch).num_steps and epoch < self.max_epoch:
            return epoch + 1, 0
        return epoch, step

    @property
    def remaining(self) -> int:
        """How many batches the next ``iter()`` yields on this rank."""
        epoch, step = self.next_start()
        return self.epoch_plan(epoch).num_steps - step

    def __iter__(self) -> Iterator[T_co]:
        return self._pass()

    def _pass(self) -> Iterator[T_co]:
        # A generator: nothing here runs before the first next(). torchdata's loaders call
        # iter() once before loading a state and once after, and only advance the second.
        if self._moves_on():
            self._place(self._epoch + 1, dict.fromkeys(self.progress_keys, 0))
        placements = self._placements
        epoch, rank = self._epoch, self.dp_rank
        plan = self.epoch_plan(epoch)
        step = self._start_step(plan)
        self._step = step
        chunk = 1
        while step < plan.num_steps:
            stop = min(plan.num_steps, step + chunk)
            for batch in plan.batches(rank, step, stop):
                if self._placements != placements:
                    return  # the cursor was placed elsewhere: this pass is over
                step += 1
                self._step = step
                yield batch
            chunk = min(2 * chunk, self._chunk_steps())

    def describe_progress(self) -> list[tuple[str, str]]:
        """Where the cursor is, as ``(label, text)`` lines (what ``dataorder inspect`` prints)."""
        plan = self.epoch_plan()
        position = self._position
        step = plan.step_of(position)
        where, describe = self._describe_position(position), getattr(plan, "describe", None)
        if where is None and callable(describe):
            where = describe(position, self._epoch)
        elif where is None:
            where = ", ".join(f"{k}={v}" for k, v in position.items()) + f" in epoch {self._epoch}"
        done = f"{step} of {plan.num_steps} done; {self.remaining} left on every rank"
        return [("position", where), (self.steps_label, done), *self._progress_details()]

    # -- state ----------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickle, deepcopy, torch.save) is a saved sampler: like a loaded state, its
        # position becomes its origin. Cached plans hold closures; they are rebuilt on demand.
        state = self.__dict__.copy()
        state.update(
            _origin=self._position,
            _step=None,
            _loaded=True,
            _restart=False,
            _plans={},
        )
        return state

    def state_dict(self) -> dict[str, Scalar]:
        """Return the cursor as a flat, JSON-serialisable dict (see :mod:`dataorder.core.state`)."""
        return self._state_at(self._epoch, self._position)

    def state_at(self, epoch: int, step: int = 0) -> dict[str, Scalar]:
        """The state this sampler writes with its cursor after ``step`` steps of ``epoch``, the
        cursor unmoved: what a caller that knows a step's position (a loader's read-ahead moves
        the cursor past it) records, every key included (a ``mixture`` tag among them).

        Args:
            epoch: The epoch, ``0 .. max_epoch``.
            step: Steps of this sampler done in ``epoch`` (batches of a batch sampler, indices
                of a per-index one), ``0 .. `` the epoch's steps on this layout.

        Raises:
            ValueError: If ``epoch`` or ``step`` is out of range (naming it and its value).

        >>> from dataorder.llm import MegatronPretrainingSampler
        >>> s = MegatronPretrainingSampler(10, 2, 0, 1)
        >>> s.state_at(0, 3)["consumed"]
        6
        """
        epoch = check_int("epoch", epoch, min_value=0, max_value=self.max_epoch)
        plan = self.epoch_plan(epoch)
        step = check_int("step", step, min_value=0, max_value=plan.num_steps)
        return self._state_at(epoch, plan.progress_at(step))

    def _state_at(self, epoch: int, progress: Mapping[str, int]) -> dict[str, Scalar]:
        """The state at ``(epoch, progress)``: the one writer (NOTE [ The state path ])."""
        own, end = self._extra_keys()
        return build_state(
            self.state_kind,
            epoch=epoch,
            config=self.order_config(),
            progress=progress,
            layout=self.layout_info(),
            extras=extra_values(own, self, epoch, progress),
            trailer=extra_values(end, self, epoch, progress),
        )

    def state_position(self, state: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
        """``(epoch, progress)`` where ``state`` (also a foreign checkpoint this sampler's
        compat mode loads) puts the cursor; the cursor does not move.

        Raises:
            TypeError, ValueError: As :meth:`load_state_dict`.
        """
        epoch, progress, _ = self._located(state)
        return epoch, progress

    def _located(self, state_dict: object) -> tuple[int, dict[str, int], bool]:
        """``(epoch, progress, foreign)`` of any state: the one reader (NOTE [ The state path ])."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a dict; got {type(state_dict).__name__}")
        if "format" not in state_dict:
            foreign = self._read_foreign(state_dict)
            if foreign is not None:
                return foreign[0], dict(foreign[1]), True
        keys = [*chain(*self._extra_keys())]
        state = without_repeated_layout(state_dict, self._layout_in_config())
        saved = {k.name: state.pop(k.name) for k in keys if k.name in state}
        # The configuration first: a state of another configuration (one corpus loaded into a
        # mixture) lacks the other's extra keys, and the field that differs says why.
        epoch, progress = self._checked_state(state)
        check_extras(keys, saved, self, epoch, progress, state)
        return epoch, progress, False

    def state_after(
        self, state: Mapping[str, Any], steps: int, *, batch: int = 1
    ) -> dict[str, Scalar]:
        """The state ``steps`` batches after ``state``, nothing copied or moved: a loader's
        snapshot plus the batches it handed out since (torchdata's ``_steps_since_snapshot``;
        NOTE [ The consumed state ] in :mod:`dataorder.integrations.common`), along the pass
        that continues ``state`` (NOTE [ The loop contract ]: a state at its epoch's end goes
        on in the next epoch, from its start; a pass never crosses an epoch's end).

        Args:
            state: A state of this sampler (any layout it can continue on; also the foreign
                checkpoints its compat mode loads).
            steps: Batches handed out after ``state``, ``>= 0``.
            batch: Items per batch, for a per-index sampler batched by a loader (``steps``
                batches of ``batch`` items; the last batch of an epoch may be shorter).

        Returns:
            The state this sampler writes at that position (a new dict).

        Raises:
            ValueError: If ``state`` is refused (as :meth:`load_state_dict` refuses it), or
                ``steps`` batches do not fit in what the pass has left.

        >>> from dataorder.llm import MegatronPretrainingSampler
        >>> s = MegatronPretrainingSampler(10, 2, 0, 1)
        >>> s.state_after(s.state_dict(), 2)["consumed"]
        4
        """
        steps = check_int("steps", steps, min_value=0)
        batch = check_int("batch", batch, min_value=1)
        epoch, progress = self.state_position(state)
        plan = self._plan_through(epoch, progress)
        step = plan.step_of(progress)
        if steps and step >= plan.num_steps and epoch < self.max_epoch:
            epoch, step = epoch + 1, 0  # a state at its epoch's end: the next pass moves on
            plan = self._plan_through(epoch, None)
        left = plan.num_steps - step
        if steps * batch > left and -(-left // batch) < steps:
            fail(
                "steps",
                f"at most {-(-left // batch)} batches of {batch}: what the pass from the state "
                f"has left in epoch {epoch} ({left} steps of this sampler)",
                steps,
            )
        moved = plan.progress_at(step + min(steps * batch, left)) if steps else dict(progress)
        return self._state_at(epoch, moved)

    def count_position(
        self, count: int, *, name: str = "consumed_samples"
    ) -> tuple[int, dict[str, int]]:
        """``(epoch, progress)`` where a run-wide count puts the cursor on this layout.

        The one reading of ``consumed_samples=`` (NOTE [ The run-wide count ]); the cursor
        does not move.

        Args:
            count: The run-wide count (positions the run has taken, padding included).
            name: The argument's name, for messages.

        Raises:
            TypeError: If this sampler takes no run-wide count, or ``count`` is not an int.
            ValueError: If ``count`` is negative, past the last epoch, past the first epoch
                where epochs start at other counts on other layouts, or inside a step of this
                layout; the message names ``name`` and says why.
        """
        runs = self._run_count()
        if runs is None:
            raise TypeError(f"{type(self).__name__} takes no run-wide count ({name}=)")
        return runs.position(
            check_int(name, count, min_value=0),
            name=name,
            max_epoch=self.max_epoch,
            layout=self.layout_info(),
            key=self.progress_keys[0],
            step_of=lambda e, progress: self.epoch_plan(e).step_of(progress, strict=True),
        )

    def _count_now(self) -> int:
        """The run-wide count at the cursor (a sampler's ``consumed_samples``)."""
        runs = self._run_count()
        if runs is None:
            raise TypeError(f"{type(self).__name__} takes no run-wide count")
        return runs.start(self._epoch) + self._position[self.progress_keys[0]]

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Place the cursor where ``state_dict`` says; the next ``iter()`` continues from there.

        The position must be one the saving layout reaches (a tampered or corrupted count is
        refused, naming the field) and one this layout can continue from.

        Raises:
            TypeError: If ``state_dict`` is not a mapping.
            ValueError: If it is not a dataorder state of this kind, comes from another
                configuration (the message names the field), or describes a position the saving
                layout never reaches or this layout cannot continue from; or is a foreign
                checkpoint of another compat mode. The sampler is unchanged when it raises.
        """
        epoch, progress, foreign = self._located(state_dict)
        self._apply_state(epoch, progress, foreign=foreign)

    def _checked_state(self, state_dict: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
        """``(epoch, progress)`` of a dataorder state, checked for :meth:`load_state_dict`."""
        layout = self.layout_info()
        epoch, progress, saved_layout = parse_state(
            state_dict,
            kind=self.state_kind,
            config=self.order_config(),
            progress_keys=self.progress_keys,
            layout_keys=tuple(layout),
            labels=self.config_labels,
        )
        if not self.elastic:
            for key, ours in layout.items():
                if saved_layout[key] != ours:
                    raise ValueError(
                        f"this sampler cannot resume on another layout: {key} is "
                        f"{saved_layout[key]} in the state but {ours} here"
                    )
        if epoch > self.max_epoch:
            raise ValueError(
                f"state's epoch must be an int in [0, {self.max_epoch}]; got epoch={epoch}"
            )
        # progress the layout that wrote the state never reaches is refused
        try:
            saved = self.epoch_plan(epoch, layout=saved_layout)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"state['layout.*'] must describe a valid layout; got {dict(saved_layout)} ({err})"
            ) from None
        try:
            saved.step_of(progress, strict=True)
        except ValueError as err:
            fields = ", ".join(f"state[{k!r}]={v}" for k, v in progress.items())
            raise ValueError(
                f"{fields} is not a position the saving layout {dict(saved_layout)} reaches in "
                f"epoch {epoch}: {err}"
            ) from None
        try:
            self.epoch_plan(epoch).step_of(progress)
        except ValueError as err:
            raise ValueError(
                f"cannot resume epoch {epoch} on this layout ({layout}): {err}"
            ) from None
        return epoch, dict(progress)

    def _apply_state(self, epoch: int, progress: Mapping[str, int], *, foreign: bool) -> None:
        """Place the cursor at a validated ``(epoch, progress)`` (NOTE [ The loop contract ];
        ``foreign``: another library's checkpoint, placed where its own sampler continues)."""
        if (
            not foreign
            and self._loop_owns_epoch
            and self._step is None
            and epoch < self._epoch
            and self.epoch_plan().step_of(self._origin) == 0
        ):
            # The loop has said a later epoch and read nothing since: the loop's epoch wins. A
            # loader's state taken between set_epoch(e) and e's first batch is its last
            # iterator's, in e - 1; so is the state a loop that resumes at e after a finished
            # e - 1 loads. A loader that drops a short last batch leaves that batch's indices.
            plan = self.epoch_plan(epoch)
            left = plan.num_steps - plan.step_of(progress)
            if left:
                warnings.warn(
                    f"the loop set epoch {self._epoch} before loading a state of epoch {epoch} "
                    f"with {left} of its {plan.num_steps} steps left on this rank; following the "
                    f"loop, they are skipped (call set_epoch({epoch}) first to finish epoch "
                    f"{epoch})",
                    stacklevel=3,
                )
            self._place(self._epoch, self._origin, loaded=True)
            self._restart = True
            return
        self._place(epoch, progress, loaded=True)


class CursorBatchSampler(CursorSampler[T_co]):
    """A :class:`CursorSampler` whose items are whole batches (``batch_sampler=`` in a loader).

    Its :attr:`sampler` is itself. torch's ``BatchSampler`` wraps an index sampler there, and
    the frameworks that own the epoch call ``set_epoch`` on ``loader.batch_sampler.sampler``
    (Lightning calls it on nothing else), so this is how they reach a dataorder batch sampler.
    """

    @property
    def sampler(self) -> CursorBatchSampler[T_co]:
        """This sampler: where Lightning and Accelerate call ``set_epoch``."""
        return self
