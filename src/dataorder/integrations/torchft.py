"""torchft: a fault-tolerant run's data, served from the committed step and the quorum.

torchft (``pip install torchft==0.2.0``) runs replica groups that leave and rejoin between
steps: a lighthouse decides each step's quorum, ``should_commit()`` decides whether the step
counts (a failed commit runs the same step again) and a rejoining replica heals from a peer,
``{"step", "batches_committed"}`` included. :class:`LiveLoader` asks the ``Manager`` where the
run is and who takes part, and serves this replica's items of
:class:`~dataorder.live.LiveBatches` through a ``DataLoader`` (workers and prefetch included)::

    live = LiveBatches(sampler)                        # the job's nominal layout
    loader = LiveLoader(live, manager, fetch=load)     # load(item) -> a tensor batch, in workers
    while manager.current_step() < steps:
        manager.start_quorum()
        batches = loader.step_batches()                # this replica's share of this step
        units = loader.units()                         # samples (tokens) of the global batch
        loss_sum(batches) / units -> backward          # then allreduce the gradients with SUM
        if manager.should_commit():
            optimizer.step()

Nothing is checkpointed for the data: a healed or newly started replica reads the step torchft
gave it, and the loader registers the configuration's fingerprint with the ``Manager`` so a
replica restarted with another nominal configuration is refused when it heals
(:meth:`~dataorder.live.LiveBatches.load_state_dict`). docs/integrations.md has the whole loop.

NOTE [ Live prefetch ]
    A micro-batch's content depends only on its position (NOTE [ Live shares ] in
    :mod:`dataorder.live.batches`), so the loader prefetches the items of the steps ahead
    *assuming the quorum stays*. The items (the indices) are computed in the main process, from
    the live object itself, when the ``DataLoader`` draws them from its sampler; the workers
    only run ``fetch(item)``. A worker never holds a copy of the order: a forked copy would miss
    what the main process changes later (a :class:`~dataorder.llm.mixlog.MixtureLog` entry
    appended after the workers started) and serve the old weights. An item drawn ahead can
    still predate such an entry, so :meth:`LiveLoader.step_batches` computes the step's items
    again when it serves them and compares: on any difference it drops the prefetched items and
    fetches the step again. When the quorum changes (a failed commit re-runs the step, the
    quorum changed, a heal moved the step) it also drops the prefetched items and starts a new
    pass at the step torchft reports: a re-plan, O(1) in the dataset. With
    ``persistent_workers`` the workers stay up across passes (torch discards what they had in
    flight). What is served is therefore always ``live.items(...)`` at the time it is served.

torch and torchft are imported lazily; the ``Manager`` is only asked ``current_step()``,
``batches_committed()``, ``participating_rank()``, ``num_participants()`` and
``register_state_dict_fn``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dataorder._validate import check_int, fail
from dataorder.live.batches import LiveBatches

__all__ = ["STATE_KEY", "LiveLoader", "require_torchft"]

#: The key the loader registers its state function under with the ``Manager``.
STATE_KEY = "dataorder.live"


def require_torchft() -> Any:
    """Import torchft, or say which ``pip install`` line is missing."""
    try:
        return importlib.import_module("torchft")
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "dataorder.integrations.torchft needs torchft: pip install torchft==0.2.0 "
            "(or pip install dataorder[torchft])"
        ) from err


def _identity(item: Any) -> Any:
    return item


def _same(a: Any, b: Any) -> bool:
    """Whether two items are equal (lists, tuples, dicts, numpy arrays and scalars, nested)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_same(a[k], b[k]) for k in a)
        )
    if hasattr(a, "__dict__") and type(a) is type(b):
        return _same(vars(a), vars(b))
    equal = a == b
    return bool(np.all(equal)) if isinstance(equal, np.ndarray) else bool(equal)


class _Fetch:
    """A map-style dataset whose "index" is an item the main process computed: the workers
    only ``fetch`` it (NOTE [ Live prefetch ]); they never compute an order."""

    def __init__(self, fetch: Callable[[Any], Any]) -> None:
        self.fetch = fetch

    def __getitem__(self, key: tuple[int, int, int, Any]) -> tuple[int, int, int, Any, Any]:
        tag, position, k, item = key
        return tag, position, k, item, self.fetch(item)


class _Keys:
    """This replica's items for the steps ahead, under one quorum, computed in the main
    process from the live object when the ``DataLoader`` asks for them."""

    def __init__(self, live: LiveBatches[Any], inner_rank: int, inner_size: int) -> None:
        self.live = live
        self.inner_rank = inner_rank
        self.inner_size = inner_size
        self.plan: tuple[int, int, int, int] = (0, 0, 1, 0)  # (start, participant, P, tag)

    def __iter__(self) -> Iterator[tuple[int, int, int, Any]]:
        start, participant, participants, tag = self.plan
        advance = participants if self.live.mode == "per_participant" else 1
        position = start
        while True:
            items = self.live.items(
                position, participant, participants, self.inner_rank, self.inner_size
            )
            for k, item in enumerate(items):
                yield tag, position, k, item
            position += advance


class LiveLoader:
    """This replica's items of a :class:`~dataorder.live.LiveBatches` at the step torchft is on.

    Args:
        live: The run's :class:`~dataorder.live.LiveBatches` (the same configuration on every
            replica; a healing replica refuses a peer's other one).
        manager: The replica's ``torchft.Manager``.
        fetch: ``fetch(item) -> batch``, run in the loader's workers: turns an item (a
            micro-batch of indices, packed rows, computed in the main process) into what the
            model trains on. Default: the item itself.
        inner_rank: This process's rank inside its replica group (HSDP), and
        inner_size: the group's size: each inner rank trains its column of the group's rows.
        register: Register the configuration with the ``Manager``'s state (sent to a healing
            replica, which checks it).
        **loader_kwargs: ``DataLoader`` keywords (``num_workers``, ``prefetch_factor``,
            ``persistent_workers``, ``pin_memory``, ...); ``batch_size``, ``sampler`` and
            ``collate_fn`` are the loader's own.

    Raises:
        TypeError: If ``live`` is not a :class:`~dataorder.live.LiveBatches`, or a loader
            keyword is one the loader sets.
        ValueError: If ``inner_rank``/``inner_size`` do not fit the nominal layout.
    """

    def __init__(
        self,
        live: LiveBatches[Any],
        manager: Any,
        *,
        fetch: Callable[[Any], Any] | None = None,
        inner_rank: int = 0,
        inner_size: int = 1,
        register: bool = True,
        **loader_kwargs: Any,
    ) -> None:
        if not isinstance(live, LiveBatches):
            fail("live", "a dataorder.live.LiveBatches", type(live).__name__, TypeError)
        own = sorted({"batch_size", "sampler", "batch_sampler", "collate_fn"} & set(loader_kwargs))
        if own:
            fail("loader_kwargs", "DataLoader keywords the loader does not set", own, TypeError)
        live.positions(0, 0, 1, inner_rank, inner_size)  # checks inner_rank and inner_size
        from torch.utils.data import DataLoader

        self.live = live
        self.manager = manager
        self.inner_rank = check_int("inner_rank", inner_rank, min_value=0)
        self.inner_size = check_int("inner_size", inner_size, min_value=1)
        self._keys = _Keys(live, self.inner_rank, self.inner_size)
        self._loader: DataLoader[Any] = DataLoader(
            _Fetch(fetch or _identity),  # type: ignore[arg-type]
            batch_size=None,
            sampler=self._keys,
            collate_fn=_identity,
            **loader_kwargs,
        )
        self._iter: Iterator[Any] | None = None
        self._expect: tuple[int, int, int] | None = None  # (position, participant, P) next
        self._tag = 0
        self.replans = 0
        self.last: dict[str, int] = {}
        if register:
            manager.register_state_dict_fn(STATE_KEY, live.load_state_dict, live.state_dict)

    def _position(self) -> int:
        if self.live.mode == "per_participant":
            return int(self.manager.batches_committed())
        return int(self.manager.current_step())

    def step_batches(self) -> list[Any]:
        """This replica's batches (``fetch(item)`` of each item) at the step torchft is on.

        Call it after ``manager.start_quorum()``: it asks ``participating_rank()`` and
        ``num_participants()``, which wait for the quorum (and a synchronous heal). A replica
        that does not take part in this step (healing under an asynchronous quorum, a spare)
        gets ``[]``: it still joins the gradient allreduce, with zeros. A changed quorum, a
        failed commit (the same step again) or a heal re-plans (NOTE [ Live prefetch ]).
        """
        participant = self.manager.participating_rank()
        participants = int(self.manager.num_participants())
        position = self._position()
        self.last = {
            "step": int(self.manager.current_step()),
            "position": position,
            "participant": -1 if participant is None else int(participant),
            "participants": participants,
        }
        if participant is None:
            return []
        participant = int(participant)
        want = (position, participant, participants)
        if self._iter is None or self._expect != want:
            self._replan(position, participant, participants)
        expected = self.live.items(
            position, participant, participants, self.inner_rank, self.inner_size
        )
        out = self._serve(position, expected)
        if out is None:  # the log changed under prefetched items: fetch them again
            self._replan(position, participant, participants)
            out = self._serve(position, expected)
            if out is None:  # pragma: no cover - the order changed while it was being fetched
                raise RuntimeError(
                    f"the loader's items at position={position} changed while they were "
                    "fetched: is the sampler's mixture log written from another thread?"
                )
        advance = participants if self.live.mode == "per_participant" else 1
        self._expect = (position + advance, participant, participants)
        return out

    def _replan(self, position: int, participant: int, participants: int) -> None:
        self._tag += 1
        self._keys.plan = (position, participant, participants, self._tag)
        self._iter = iter(self._loader)
        self.replans += 1

    def _serve(self, position: int, expected: list[Any]) -> list[Any] | None:
        """The fetched batches of ``expected`` (this step's items, computed now in the main
        process), or None if an item prefetched under an earlier state of the order (a mixture
        log written since) differs from it."""
        assert self._iter is not None  # for mypy: _replan set it
        out = []
        stale = False
        for k, want in enumerate(expected):
            tag, got_position, got_k, item, batch = next(self._iter)
            if (tag, got_position, got_k) != (self._tag, position, k):  # pragma: no cover
                raise RuntimeError(
                    f"the loader served item {got_k} of position {got_position} (pass {tag}) "
                    f"where item {k} of position {position} (pass {self._tag}) was due"
                )
            stale = stale or not _same(item, want)
            out.append(batch)
        return None if stale else out

    def step_items(self) -> list[Any]:
        """This replica's items (without ``fetch``) at the step of the last
        :meth:`step_batches`: what a test or a log records."""
        if self.last.get("participant", -1) < 0:
            return []
        return self.live.items(
            self.last["position"],
            self.last["participant"],
            self.last["participants"],
            self.inner_rank,
            self.inner_size,
        )

    def units(self) -> int:
        """Units (samples, or tokens) of the step of the last :meth:`step_batches`, all
        participants together: divide the summed loss by it, and allreduce the gradients with
        a sum (or multiply by ``num_participants()`` under torchft's default average)."""
        if not self.last:
            raise RuntimeError("call step_batches() first: units() are those of its step")
        if self.live.mode == "per_participant":
            return self.live.units(
                self.last["position"], self.last["participants"], self.inner_size
            )
        return self.live.units(self.last["position"])
