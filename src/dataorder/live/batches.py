"""Live elasticity: which items each replica group trains at a committed step, whoever takes part.

Fault-tolerant training (torchft) runs replica groups that leave and rejoin between steps; each
step has a quorum of ``participants`` groups, and a step whose commit fails runs again under
the next quorum. :class:`LiveBatches` makes the data of a run a pure function of the
run-wide step and the quorum, for any dataorder sampler, built from its epoch plans
(``epoch_plan(e).batches``, the order every sampler answers) and nothing else: no data
checkpoint, no replay, no per-replica state.

NOTE [ Live shares ]
    The sampler is built for the job's *nominal* layout: ``D`` data-parallel ranks and a global
    batch of ``A`` micro-steps (``global_batch_size // (micro_batch_size * D)``; 1 without a
    global batch size). Global step ``g`` of epoch ``e`` holds the nominal micro-batches
    ``j = 0 .. A*D - 1`` in the order the nominal job reads them, micro-step ``a = j // D`` of
    rank ``r = j % D`` (an epoch's last global step may hold fewer micro-steps). Run-wide steps
    count the epochs' global steps end to end.

    ``mode="constant"``: those micro-batches are cut in *rows* of ``inner_size`` consecutive
    micro-batches (one per rank inside a replica group; ``inner_size`` divides ``D``, so a row
    lies inside one micro-step and a bucket sampler's row has one shape), and the rows are split
    over the participants in contiguous shares that differ by at most one row (participant
    ``p`` of ``P`` gets ``rows // P`` rows, one more if ``p < rows % P``; a participant may get
    none). Inner rank ``i`` of a participant trains the ``i``-th micro-batch of each of its
    rows. Every committed step trains the nominal global batch, whoever takes part: the
    committed steps together are exactly the base order, and a step re-run after a failed
    commit is re-split over its new quorum with the same content.

    ``mode="per_participant"`` (torchft's DYNAMIC world size): the base order is one stream of
    micro-batches, epoch after epoch; participant-batch ``b`` is stream micro-batches
    ``[b*A*I, (b+1)*A*I)`` (``I = inner_size``: each inner rank trains ``A`` micro-batches, its
    nominal accumulation), and at a step whose ``batches_committed`` is ``c`` participant ``p``
    trains participant-batch ``c + p``. torchft adds the number of participants to
    ``batches_committed`` at each commit, so the committed participant-batches are exactly the
    first ``batches_committed`` of the stream.

    Either way a micro-batch's *content* depends only on its position, never on the quorum, so
    loader workers can fetch it ahead; only which positions a participant takes changes.

NOTE [ Live positions ]
    The answer for a step never depends on the calls made before (a replica that ran through
    and one restarted at that step agree). Where every epoch has the same steps (the sampler's
    run-wide count declares epochs of equal positions, :attr:`~dataorder.core.cursor.RunCount.
    per_epoch`: the Megatron samplers, one packed corpus), the epoch of a step is found by
    arithmetic, in O(1), up to the sampler's last epoch. Otherwise (a blend's epochs differ by a
    step; a bucket or packed order whose epoch lengths depend on the epoch's shuffle) the epochs
    are counted one by one from 0 and their starts kept, so each is counted once per object; a
    step at or past ``MAX_EPOCHS_AHEAD`` times the first epoch's length is refused, a bound
    computed from the configuration alone.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from dataorder._validate import check_choice, check_int, check_optional_int, fail
from dataorder.core.batching import BatchRule, read_spans, rule_of
from dataorder.core.cursor import CursorSampler, EpochPlan
from dataorder.core.state import Scalar, config_fingerprint

__all__ = ["LIVE_FORMAT", "MAX_EPOCHS_AHEAD", "MODES", "LiveBatches", "Share", "share_of"]

T = TypeVar("T")

#: ``mode=`` values.
MODES: tuple[str, ...] = ("constant", "per_participant")
#: The ``format`` a :meth:`LiveBatches.state_dict` records.
LIVE_FORMAT = "dataorder.live"
_VERSION = 1
#: Global batches whose units are kept.
_UNITS_CACHE = 8
#: Where a sampler's epochs differ in length (a blend's), run-wide positions are counted epoch by
#: epoch (each builds the sampler's plan of that epoch once, cached): a step at or past this many
#: times the first epoch's global steps (stream micro-batches in ``"per_participant"``) is
#: refused, whatever was asked before (NOTE [ Live positions ]).
MAX_EPOCHS_AHEAD = 2**16


class Share(tuple[int, int]):
    """``(start, stop)``: the rows (``mode="constant"``) or participant-batches a participant
    takes; a tuple, so it compares and prints as one."""

    __slots__ = ()

    @property
    def start(self) -> int:
        """The first row."""
        return self[0]

    @property
    def stop(self) -> int:
        """One past the last row."""
        return self[1]


def share_of(rows: int, participant: int, participants: int) -> Share:
    """Participant ``participant``'s contiguous share of ``rows`` rows split over
    ``participants``: the first ``rows % participants`` shares hold one row more
    (NOTE [ Live shares ]).

    >>> [tuple(share_of(7, p, 3)) for p in range(3)]
    [(0, 3), (3, 5), (5, 7)]
    """
    base, extra = divmod(rows, participants)
    start = participant * base + min(participant, extra)
    return Share((start, start + base + (participant < extra)))


class LiveBatches(Generic[T]):
    """The items each replica group trains at a run-wide step, for any quorum
    (NOTE [ Live shares ] in :mod:`dataorder.live.batches`).

    Args:
        sampler: Any dataorder sampler (a :class:`~dataorder.core.cursor.CursorSampler`), built
            for the job's nominal layout (its micro-batch, nominal data-parallel size, global
            batch, seed). Its rank and cursor are not used.
        mode: ``"constant"`` (every committed step trains the nominal global batch, split over
            the participants) or ``"per_participant"`` (each participant trains its nominal
            share; the position is torchft's ``batches_committed``).
        micro_steps: The sampler's steps per global step, when the sampler cannot say: a
            per-index sampler (torch's ``DistributedSampler``) batched ``k`` indices per
            optimizer step by its loader takes ``micro_steps=k``. Default: the sampler's
            ``global_batch_size // (micro_batch_size * data-parallel size)``, else 1.

    Raises:
        TypeError: If ``sampler`` is not a dataorder sampler.
        ValueError: If ``mode`` is unknown, the sampler's global batch is a schedule (a live job
            needs one global batch), ``micro_steps`` disagrees with its global batch size, or its
            first epoch is empty.

    Example:
        >>> from dataorder import MegatronPretrainingRandomSampler
        >>> s = MegatronPretrainingRandomSampler(64, 2, 0, 4, seed=0, global_batch_size=16)
        >>> live = LiveBatches(s)
        >>> live.micro_steps, live.units(0)
        (2, 16)
        >>> [len(live.items(0, p, 3)) for p in range(3)]  # 8 micro-batches over 3 groups
        [3, 3, 2]
        >>> sum((live.items(0, p, 3) for p in range(3)), []) == live.global_batch(0)
        True
    """

    def __init__(
        self, sampler: CursorSampler[T], *, mode: str = "constant", micro_steps: int | None = None
    ) -> None:
        if not isinstance(sampler, CursorSampler):
            fail(
                "sampler",
                "a dataorder sampler (a CursorSampler: every sampler of dataorder.llm, "
                "dataorder.diffusion and dataorder.parallel)",
                type(sampler).__name__,
                TypeError,
            )
        self._sampler = sampler
        self._mode = check_choice("mode", mode, MODES)
        self._rule: BatchRule = rule_of(sampler)
        layout = sampler.layout_info()
        plan0 = sampler.epoch_plan(0, layout=layout)
        self._dp = plan0.dp_size
        derived = self._derived_micro_steps(sampler, layout)
        given = check_optional_int("micro_steps", micro_steps, min_value=1)
        if given is not None and derived is not None and given != derived:
            fail(
                "micro_steps",
                f"None or {derived} (the sampler's global batch is {derived} micro-steps of "
                f"{self._dp} ranks)",
                micro_steps,
            )
        self._a = given if given is not None else (derived or 1)
        if plan0.num_steps == 0:
            fail("sampler", "a sampler with at least one step in epoch 0", "<an empty epoch>")
        self._layout = layout
        self._equal = self._equal_steps()
        # steps per epoch (the sampler's micro-steps), and where each epoch starts in run-wide
        # global steps and in stream micro-batches: extended lazily, ints only
        self._steps: list[int] = []
        self._global_starts: list[int] = [0]
        self._stream_starts: list[int] = [0]
        self._units: OrderedDict[tuple[int, int, int], int] = OrderedDict()
        self._config = self._make_config()
        self._fingerprint = config_fingerprint(self._config)

    @staticmethod
    def _derived_micro_steps(sampler: CursorSampler[Any], layout: Mapping[str, int]) -> int | None:
        gbs = sampler.order_config().get("global_batch_size")
        if isinstance(gbs, str):
            fail(
                "sampler",
                "a sampler with one global batch size (a live job splits the same global batch "
                "whoever takes part; a batch-size schedule is not supported)",
                f"<global_batch_size {gbs}>",
            )
        if not gbs:
            return None
        block = int(layout.get("micro_batch_size", 1)) * sampler.epoch_plan(0).dp_size
        return int(gbs) // block

    def _make_config(self) -> dict[str, Scalar]:
        config: dict[str, Scalar] = {
            "kind": self._sampler.state_kind,
            "mode": self._mode,
            "micro_steps": self._a,
        }
        config.update({f"config.{k}": v for k, v in self._sampler.order_config().items()})
        config.update({f"layout.{k}": v for k, v in self._layout.items()})
        return config

    # -- what it is -------------------------------------------------------------------------------
    @property
    def sampler(self) -> CursorSampler[T]:
        """The sampler whose order this serves."""
        return self._sampler

    @property
    def mode(self) -> str:
        """``"constant"`` or ``"per_participant"``."""
        return self._mode

    @property
    def micro_steps(self) -> int:
        """The sampler's steps (micro-steps) per global step."""
        return self._a

    @property
    def dp_size(self) -> int:
        """The nominal data-parallel size the sampler was built for."""
        return self._dp

    @property
    def batching(self) -> BatchRule:
        """What an item is, and what its slots cover (the sampler's rule)."""
        return self._rule

    @property
    def fingerprint(self) -> str:
        """16 hex digits over the sampler's kind, configuration, nominal layout, the mode and
        the micro-steps: what a restarted replica must agree on."""
        return self._fingerprint

    # -- the run's geometry -----------------------------------------------------------------------
    def _plan(self, epoch: int) -> EpochPlan[T]:
        return self._sampler.epoch_plan(epoch, layout=self._layout)

    def _equal_steps(self) -> int | None:
        """The sampler's steps in every epoch, when its run-wide count declares epochs of
        equal positions (NOTE [ Live positions ]); else None."""
        runs = self._sampler._run_count()  # the core's own declaration, read by its layer
        if runs is None or runs.per_epoch is None:
            return None
        n = self._plan(0).num_steps
        if self._sampler.max_epoch >= 1 and self._plan(1).num_steps != n:  # pragma: no cover
            return None  # a declaration the plans contradict: count instead
        return n

    def _per_epoch(self, kind: str) -> int:
        """Global steps (``kind="global"``) or stream micro-batches (``"stream"``) of each epoch,
        when all epochs have the same steps."""
        assert self._equal is not None  # for mypy: callers check it
        return -(-self._equal // self._a) if kind == "global" else self._equal * self._dp

    def _extend(self, step: int) -> None:
        e = len(self._steps)
        if e > self._sampler.max_epoch:
            self._past_last(step)
        n = self._plan(e).num_steps
        self._steps.append(n)
        self._global_starts.append(self._global_starts[-1] + -(-n // self._a))
        self._stream_starts.append(self._stream_starts[-1] + n * self._dp)

    def _past_last(self, step: int) -> None:
        raise ValueError(
            f"step must fall within the sampler's last epoch ({self._sampler.max_epoch}): the "
            f"run passes it; got step={step}"
        )

    def _locate(self, kind: str, position: int, step: int) -> tuple[int, int, int]:
        """``(epoch, its start, its sampler steps)`` of ``position`` of the run-wide count
        ``kind`` (``"global"`` steps or ``"stream"`` micro-batches); ``step`` is what the caller
        was given, for messages (NOTE [ Live positions ])."""
        if self._equal is not None:
            per = self._per_epoch(kind)
            e = position // per
            if e > self._sampler.max_epoch:
                self._past_last(step)
            return e, e * per, self._equal
        starts = self._global_starts if kind == "global" else self._stream_starts
        first = self._first(kind)
        bound = MAX_EPOCHS_AHEAD * first
        if position >= bound:
            raise ValueError(
                f"step must be below {bound} ({MAX_EPOCHS_AHEAD} times the first epoch's "
                f"{first} {'global steps' if kind == 'global' else 'micro-batches'}: this "
                f"sampler's epochs differ in length and are counted one by one); got step={step}"
            )
        while starts[-1] <= position:
            self._extend(step)
        e = bisect.bisect_right(starts, position) - 1
        return e, starts[e], self._steps[e]

    def _first(self, kind: str) -> int:
        if len(self._steps) == 0:
            self._extend(0)
        return self._global_starts[1] if kind == "global" else self._stream_starts[1]

    def epoch_of(self, step: int) -> int:
        """The epoch run-wide global step ``step`` falls in (``mode="constant"``).

        Raises:
            ValueError: If ``step`` is negative, or past the sampler's last epoch.
        """
        step = check_int("step", step, min_value=0)
        return self._locate("global", step, step)[0]

    def global_steps(self, epoch: int) -> int:
        """Global steps of ``epoch`` (its last may hold fewer micro-steps)."""
        epoch = check_int("epoch", epoch, min_value=0, max_value=self._sampler.max_epoch)
        if self._equal is not None:
            return self._per_epoch("global")
        if epoch >= MAX_EPOCHS_AHEAD:
            fail("epoch", f"an int below {MAX_EPOCHS_AHEAD} (MAX_EPOCHS_AHEAD)", epoch)
        while len(self._steps) <= epoch:
            self._extend(self._global_starts[-1])
        return self._global_starts[epoch + 1] - self._global_starts[epoch]

    def _global(self, step: int) -> tuple[int, int, int]:
        """``(epoch, first micro-step, micro-steps)`` of run-wide global step ``step``."""
        e, start, n = self._locate("global", step, step)
        a0 = (step - start) * self._a
        return e, a0, min(self._a, n - a0)

    def _check_quorum(
        self, participant: int, participants: int, inner_rank: int, inner_size: int
    ) -> tuple[int, int, int, int]:
        participants = check_int("participants", participants, min_value=1)
        participant = check_int("participant", participant, min_value=0)
        if participant >= participants:
            raise ValueError(
                f"participant must be an int in [0, participants - 1]; got "
                f"participant={participant} with participants={participants}"
            )
        inner_size = check_int("inner_size", inner_size, min_value=1)
        if self._dp % inner_size:
            fail(
                "inner_size",
                f"a divisor of the nominal data-parallel size {self._dp} (a row of one "
                "micro-batch per inner rank lies inside one micro-step)",
                inner_size,
            )
        inner_rank = check_int("inner_rank", inner_rank, min_value=0, max_value=inner_size - 1)
        return participant, participants, inner_rank, inner_size

    # -- the answers ------------------------------------------------------------------------------
    def share(self, step: int, participant: int, participants: int, inner_size: int = 1) -> Share:
        """The rows (``mode="constant"``) or participant-batches (``"per_participant"``) that
        ``participant`` takes at ``step``: the re-plan after a quorum change, in O(1).

        Raises:
            ValueError: As :meth:`items`.
        """
        step = check_int("step", step, min_value=0)
        participant, participants, _, inner_size = self._check_quorum(
            participant, participants, 0, inner_size
        )
        if self._mode == "per_participant":
            return Share((step + participant, step + participant + 1))
        _, _, count = self._global(step)
        return share_of(count * self._dp // inner_size, participant, participants)

    def positions(
        self,
        step: int,
        participant: int,
        participants: int,
        inner_rank: int = 0,
        inner_size: int = 1,
    ) -> list[tuple[int, int, int]]:
        """``(epoch, micro-step, nominal rank)`` of each item :meth:`items` returns: where a
        loader worker fetches it (``sampler.batch_at(micro_step, rank=rank, epoch=epoch)``)."""
        step = check_int("step", step, min_value=0)
        participant, participants, inner_rank, inner_size = self._check_quorum(
            participant, participants, inner_rank, inner_size
        )
        d = self._dp
        if self._mode == "per_participant":
            first = (step + participant) * self._a * inner_size + inner_rank
            out = []
            for t in range(self._a):
                f = first + t * inner_size
                e, start, _ = self._locate("stream", f, step)
                a, r = divmod(f - start, d)
                out.append((e, a, r))
            return out
        e, a0, count = self._global(step)
        lo, hi = share_of(count * d // inner_size, participant, participants)
        return [
            (e, a0 + j // d, j % d)
            for j in range(lo * inner_size + inner_rank, hi * inner_size, inner_size)
        ]

    def items(
        self,
        step: int,
        participant: int,
        participants: int,
        inner_rank: int = 0,
        inner_size: int = 1,
    ) -> list[T]:
        """The items ``participant`` of ``participants`` replica groups trains at ``step`` on
        its inner rank ``inner_rank`` of ``inner_size``: micro-batches, bucket batches, packed
        rows or indices, as the sampler yields them.

        ``step`` is the run-wide committed step (torchft's ``current_step()``) in
        ``mode="constant"``, and torchft's ``batches_committed()`` in ``"per_participant"``.

        Raises:
            TypeError: If an argument is not an int.
            ValueError: If ``step`` is negative, ``participant >= participants``, ``inner_rank
                >= inner_size``, or ``inner_size`` does not divide the nominal data-parallel
                size.
        """
        return self._fetch(self.positions(step, participant, participants, inner_rank, inner_size))

    def _fetch(self, positions: Sequence[tuple[int, int, int]]) -> list[T]:
        """The items at ``positions``: one ``batches`` call per (epoch, rank) run of
        consecutive micro-steps."""
        out: list[Any] = [None] * len(positions)
        runs: dict[tuple[int, int], list[int]] = {}
        for k, (e, _, r) in enumerate(positions):
            runs.setdefault((e, r), []).append(k)
        for (e, r), ks in runs.items():
            plan = self._plan(e)
            first, last = positions[ks[0]][1], positions[ks[-1]][1]
            got = plan.batches(r, first, last + 1)
            for k in ks:
                out[k] = got[positions[k][1] - first]
        return out

    def global_batch(self, step: int) -> list[T]:
        """Every nominal micro-batch of run-wide global step ``step``, in the base order (what
        the participants of any quorum train together, ``mode="constant"``)."""
        step = check_int("step", step, min_value=0)
        e, a0, count = self._global(step)
        return self._fetch([(e, a0 + j // self._dp, j % self._dp) for j in range(count * self._dp)])

    def units(self, step: int, participants: int | None = None, inner_size: int = 1) -> int:
        """The samples (tokens, for packed rows) a committed ``step`` trains, all participants
        together, padding left out: what a loss summed over a participant's items is divided
        by to give the step's mean.

        ``mode="constant"``: the units of global step ``step`` (``participants`` is not needed).
        ``"per_participant"``: the units of participant-batches ``step .. step + participants -
        1`` (``step`` is ``batches_committed``), each of ``inner_size`` inner ranks.

        Raises:
            ValueError: If ``step`` is negative, or ``participants`` is missing in
                ``"per_participant"`` mode.
        """
        step = check_int("step", step, min_value=0)
        if self._mode == "per_participant":
            if participants is None:
                fail("participants", 'an int with mode="per_participant"', participants)
            participants = check_int("participants", participants, min_value=1)
            inner_size = check_int("inner_size", inner_size, min_value=1)
            key = (step, participants, inner_size)
        else:
            key = (step, 0, 1)
        cached = self._units.get(key)
        if cached is not None:
            return cached
        if self._mode == "per_participant":
            items: list[T] = []
            assert participants is not None  # for mypy: checked above
            for p in range(participants):
                for i in range(inner_size):
                    items += self.items(step, p, participants, i, inner_size)
        else:
            items = self.global_batch(step)
        _, starts, stops = read_spans(self._rule, items).spans
        value = int((stops - starts).sum())
        self._units[key] = value
        while len(self._units) > _UNITS_CACHE:
            self._units.popitem(last=False)
        return value

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Scalar]:
        """What a live job saves beside torchft's ``{"step", "batches_committed"}``: the
        configuration and its fingerprint, no position (the position is torchft's).

        A flat dict of ints and strings: ``format``, ``version``, ``fingerprint``, ``kind``,
        ``mode``, ``micro_steps``, the sampler's ``config.*`` and ``layout.*``.
        """
        return {
            "format": LIVE_FORMAT,
            "version": _VERSION,
            "fingerprint": self._fingerprint,
            **self._config,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Refuse a state written for another configuration (a replica restarted with another
        nominal layout, sampler, seed or mode), naming the field that differs. Nothing to
        restore: the position is torchft's ``step`` and ``batches_committed``.

        Raises:
            TypeError: If ``state_dict`` is not a mapping.
            ValueError: If it is not a live state, or any field differs from this one's.
        """
        if not isinstance(state_dict, Mapping):
            fail("state_dict", "a dict", type(state_dict).__name__, TypeError)
        if state_dict.get("format") != LIVE_FORMAT or state_dict.get("version") != _VERSION:
            raise ValueError(
                f"state_dict must be a {LIVE_FORMAT!r} state of version {_VERSION}; got "
                f"format={state_dict.get('format')!r}, version={state_dict.get('version')!r}"
            )
        ours = self.state_dict()
        for key in sorted(
            set(ours) | set(state_dict), key=lambda k: (k == "fingerprint", k not in ours, k)
        ):
            if state_dict.get(key) != ours.get(key):
                raise ValueError(
                    f"this replica's LiveBatches is configured differently from the job's: "
                    f"state[{key!r}] is {state_dict.get(key)!r} in the job but "
                    f"{ours.get(key)!r} here (a restart must use the job's nominal configuration)"
                )
