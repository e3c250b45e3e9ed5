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
    :mod:`dataorder.live.batches`), so the loader's workers fetch the positions of the steps
    ahead *assuming the quorum stays*. When it does not (a failed commit re-runs the step, the
    quorum changed, a heal moved the step), :meth:`LiveLoader.step_batches` drops the prefetched
    items and starts a new pass at the step torchft reports: a re-plan, O(1) in the dataset.
    With ``persistent_workers`` the workers stay up across passes (torch discards what they had
    in flight).

torch and torchft are imported lazily; the ``Manager`` is only asked ``current_step()``,
``batches_committed()``, ``participating_rank()``, ``num_participants()`` and
``register_state_dict_fn``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

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


class _Positions:
    """A map-style dataset over live positions: worker processes fetch an item by its
    ``(tag, epoch, micro_step, rank)`` key, from the sampler's order alone."""

    def __init__(self, live: LiveBatches[Any], fetch: Callable[[Any], Any]) -> None:
        self.live = live
        self.fetch = fetch

    def __getitem__(self, key: tuple[int, int, int, int]) -> tuple[int, Any, Any]:
        tag, epoch, micro_step, rank = key
        item = self.live.sampler.batch_at(micro_step, rank=rank, epoch=epoch)
        return tag, item, self.fetch(item)


class _Keys:
    """The positions of this replica's items for the steps ahead, under one quorum."""

    def __init__(self, live: LiveBatches[Any], inner_rank: int, inner_size: int) -> None:
        self.live = live
        self.inner_rank = inner_rank
        self.inner_size = inner_size
        self.plan: tuple[int, int, int, int] = (0, 0, 1, 0)  # (start, participant, P, tag)

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        start, participant, participants, tag = self.plan
        advance = participants if self.live.mode == "per_participant" else 1
        position = start
        while True:
            for e, a, r in self.live.positions(
                position, participant, participants, self.inner_rank, self.inner_size
            ):
                yield tag, e, a, r
            position += advance


class LiveLoader:
    """This replica's items of a :class:`~dataorder.live.LiveBatches` at the step torchft is on.

    Args:
        live: The run's :class:`~dataorder.live.LiveBatches` (the same configuration on every
            replica; a healing replica refuses a peer's other one).
        manager: The replica's ``torchft.Manager``.
        fetch: ``fetch(item) -> batch``, run in the loader's workers: turns an item (a
            micro-batch of indices, packed rows) into what the model trains on. Default: the
            item itself.
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
            _Positions(live, fetch or _identity),  # type: ignore[arg-type]
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
            self._tag += 1
            self._keys.plan = (position, participant, participants, self._tag)
            self._iter = iter(self._loader)
            self.replans += 1
        n = len(
            self.live.positions(
                position, participant, participants, self.inner_rank, self.inner_size
            )
        )
        out = []
        for _ in range(n):
            tag, _, batch = next(self._iter)
            if tag != self._tag:  # pragma: no cover - torch drops a reset pass's items
                raise RuntimeError("the loader served an item of a dropped pass")
            out.append(batch)
        advance = participants if self.live.mode == "per_participant" else 1
        self._expect = (position + advance, participant, participants)
        return out

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
