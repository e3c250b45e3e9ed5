"""A drop-in, mesh-aware ``torch.utils.data.DistributedSampler`` that resumes and scales.

:class:`DistributedSampler` takes the arguments of torch's sampler and splits an epoch the same
way: ``num_samples`` indices per rank, rank ``r`` taking every ``num_replicas``-th index of the
epoch from ``r`` on, the tail wrapped around (``drop_last=False``) or truncated
(``drop_last=True``) for the whole job. What changes:

* **The order is a pure function.** Position ``p`` of epoch ``e`` holds sample ``pi_e(p mod N)``,
  where ``pi_e`` is a :class:`~dataorder.core.permutation.Permutation` of the dataset keyed by
  ``derive_key(seed, epoch=e, stream="distributed", purpose="sample-order")`` (the identity with
  ``shuffle=False``). Nothing of size ``N`` is ever built: the first index of an epoch of a
  billion samples is ready in microseconds, where torch builds a ``randperm(N)`` Python list
  (about 40 bytes per index) on every rank. Positions ``>= N`` are the wrap-around padding.
* **It resumes.** The state is the epoch and ``consumed``, the global positions all ranks have
  taken (items yielded on a rank x ``num_replicas``). Loading it sets where the next ``iter()``
  starts, in torchdata's ``Stateful`` protocol; nothing is replayed. Because the global order
  does not depend on ``num_replicas``, a state loads on another ``num_replicas`` that divides
  ``consumed`` (an elastic resume).
* **It knows the data-parallel layout.** ``mesh=`` and ``dp_dims=`` take the rank and size from a
  ``DeviceMesh`` (tensor- and context-parallel peers read identical data); without them the
  initialised process group, then ``RANK``/``WORLD_SIZE``, then ``(0, 1)``.
* **Padding is declared.** :attr:`DistributedSampler.num_padding` and
  :meth:`DistributedSampler.padding_mask` say which of this rank's items are wrap-around
  repeats, so evaluation can leave them out.

``compat="torch"`` reproduces torch's exact indices (``randperm`` seeded ``seed + epoch``); it
materialises that permutation once per epoch, as torch does (as an int64 array, 8 bytes per
index, not a Python list), and keeps everything else: state, resume, mesh, padding mask.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import numpy.typing as npt
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

from dataorder._validate import check_bool, check_choice, check_int, fail, is_zero_d
from dataorder.core.blockplan import BlockPlan
from dataorder.core.cursor import CursorSampler
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED, derive_key
from dataorder.core.partition import EpochLayout, plan_epoch
from dataorder.core.permutation import MAX_DOMAIN, PERMUTATION_VERSION, Permutation
from dataorder.core.state import Scalar, split_state
from dataorder.core.topology import Topology, resolve_topology
from dataorder.parallel.compat_torch import TorchOrder

__all__ = [
    "COMPAT_MODES",
    "DistributedSampler",
    "IndexOrder",
    "KeyedOrder",
    "distributed_layout",
    "epoch_order",
]

#: Values of ``compat=``.
COMPAT_MODES: tuple[str, ...] = ("default", "torch")

_STREAM = "distributed"
_CHUNK = 1 << 16  # positions per vectorised chunk: ~0.5 MB of int64, a few ms of work

Order = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


def distributed_layout(dataset_size: int, num_replicas: int, drop_last: bool) -> EpochLayout:
    """The epoch's global blocks, exactly as torch's DistributedSampler cuts them.

    One block is one index on each of ``num_replicas`` ranks, split strided (rank ``r`` takes
    position ``r`` of each block). ``num_batches`` is torch's ``num_samples`` and
    ``total_positions`` its ``total_size``: ``drop_last=True`` keeps whole blocks only, else the
    last block is completed with padding positions ``>= dataset_size``.

    Args:
        dataset_size: Samples in the dataset (``>= 0``).
        num_replicas: Data-parallel size (``>= 1``).
        drop_last: Drop the tail (True) or pad it (False).

    Returns:
        The :class:`~dataorder.core.partition.EpochLayout` (``per_rank=1``,
        ``dp_size=num_replicas``).
    """
    return plan_epoch(
        dataset_size, per_rank=1, dp_size=num_replicas, tail="drop" if drop_last else "pad"
    )


class IndexOrder(Protocol):
    """An order of the distributed sampler: which sample each global position of an epoch holds.

    NOTE [ Index order strategies ]: the keyed order here is the default; torch's exact order
    (``compat="torch"``) is :class:`dataorder.parallel.compat_torch.TorchOrder`. Chosen once when
    the sampler is built; nothing else branches on the mode.
    """

    #: The ``compat=`` value it answers to.
    name: ClassVar[str]

    def epoch(self, dataset_size: int, *, seed: int, epoch: int) -> Order:
        """The map of an epoch's positions (``< dataset_size``) to samples."""
        ...

    def versions(self) -> dict[str, int]:
        """Versions of the constructions the order uses, recorded in the configuration."""
        ...


class KeyedOrder:
    """Position ``p`` of epoch ``e`` holds ``pi_e(p)``: a :class:`~dataorder.core.permutation.
    Permutation` of the dataset keyed by ``derive_key(seed, epoch=e, stream="distributed",
    purpose="sample-order")``. O(1) to build, vectorised, nothing of size ``N``."""

    name: ClassVar[str] = "default"

    def epoch(self, dataset_size: int, *, seed: int, epoch: int) -> Order:
        key = derive_key(seed, epoch=epoch, stream=_STREAM, purpose="sample-order")
        return Permutation(dataset_size, key)

    def versions(self) -> dict[str, int]:
        return {"permutation_version": PERMUTATION_VERSION, "key_version": KEY_DERIVATION_VERSION}


def epoch_order(
    dataset_size: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    compat: Literal["default", "torch"] = "default",
) -> Order:
    """Return the pure function ``position -> sample`` of one epoch.

    The function maps an int64 array of global positions (``>= 0``; positions ``>= dataset_size``
    are padding and wrap around to ``position mod dataset_size``) to dataset indices. In the
    default mode it is O(1) to build and vectorised; with ``compat="torch"`` building it runs
    torch's ``randperm(dataset_size)`` seeded ``seed + epoch``.

    Args:
        dataset_size: Samples in the dataset, ``>= 1``.
        seed: The shuffle seed.
        epoch: The epoch.
        shuffle: False gives the dataset order.
        compat: ``"default"`` or ``"torch"``.

    Example:
        >>> import numpy as np
        >>> order = epoch_order(10, seed=0, epoch=0, shuffle=False)
        >>> order(np.array([3, 10, 11])).tolist()  # 10 and 11 are padding
        [3, 0, 1]
    """
    n = check_int("dataset_size", dataset_size, min_value=1)
    seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
    epoch = check_int("epoch", epoch, min_value=0)
    shuffle = check_bool("shuffle", shuffle)
    strategy = _ORDERS[check_choice("compat", compat, COMPAT_MODES)]()
    if not shuffle:
        return lambda positions: positions % n
    order = strategy.epoch(n, seed=seed, epoch=epoch)
    return lambda positions: order(positions % n)


_ORDERS: dict[str, Callable[[], IndexOrder]] = {"default": KeyedOrder, "torch": TorchOrder}


def _dataset_size(dataset: object) -> int:
    if not isinstance(dataset, Sized) or is_zero_d(dataset):
        fail("dataset", "a sized dataset (with __len__)", dataset, TypeError)
    try:
        size = len(dataset)
    except OverflowError:  # len() stops at sys.maxsize
        if isinstance(dataset, range):
            r = dataset
            size = max(0, (r.stop - r.start + r.step - (1 if r.step > 0 else -1)) // r.step)
        else:
            raise ValueError(
                f"len(dataset) must be an int in [0, {MAX_DOMAIN}]; got len(dataset) > "
                f"{sys.maxsize} (len() overflowed)"
            ) from None
    # positions are int64 and the permutation works on 63-bit words: 2**62 keeps both exact
    return check_int("len(dataset)", size, min_value=0, max_value=MAX_DOMAIN)


class DistributedSampler(CursorSampler[int], _TorchDistributedSampler[int]):
    """torch's DistributedSampler, with an O(1) shuffle, exact resume, a mesh and a padding mask.

    Same arguments and partition as ``torch.utils.data.DistributedSampler`` (it is a subclass, so
    code that checks for torch's class, such as Lightning's, accepts it; the recipes for
    torchdata's StatefulDataLoader, Accelerate and Lightning are in ``docs/integrations.md``):
    every rank gets ``num_samples`` indices,
    ``num_samples x num_replicas = total_size``; rank ``r`` takes global positions
    ``r, r + num_replicas, r + 2 * num_replicas, ...``; with ``drop_last=False`` the epoch is
    padded to ``total_size`` by wrapping around to its first positions, with ``drop_last=True``
    its tail is cut. The epoch and iteration rules are NOTE [ The loop contract ] in
    :mod:`dataorder.core.cursor`: ``len()`` is ``num_samples``, a whole epoch, wherever the
    cursor is (:attr:`remaining` is what the next ``iter()`` yields); a state saved anywhere in
    epoch ``e``, after its last index included, describes epoch ``e``; the pass after one that
    ran out starts the next epoch, so a forgotten ``set_epoch`` never replays an epoch.

    Args:
        dataset: The dataset (only ``len(dataset)`` is used).
        num_replicas: Data-parallel size. Default: from ``mesh``, else the process group, else
            ``WORLD_SIZE``, else 1.
        rank: This process's data-parallel rank, in ``[0, num_replicas)``. Default: as above.
        shuffle: Shuffle every epoch (True) or keep the dataset order.
        seed: Shuffle seed, an int in ``[0, 2**63)``, identical on every rank.
        drop_last: Cut the tail (True) or pad it by wrapping around (False).
        mesh: A ``torch.distributed.device_mesh.DeviceMesh``: the rank and size are its
            data-parallel coordinates; the other dims (tensor, context parallel) read identical
            data. An explicit ``rank``/``num_replicas`` must agree with it.
        dp_dims: The mesh's data-parallel dims, e.g. ``("dp",)`` or
            ``("dp_replicate", "dp_shard")``. Default: the dims named ``dp``, ``dp_replicate``,
            ``dp_shard`` or ``data_parallel``.
        compat: ``"default"`` (the keyed permutation) or ``"torch"`` (torch's exact indices;
            :mod:`dataorder.parallel.compat_torch`).
        topology: A :class:`~dataorder.core.topology.Topology` value instead of ``rank`` and
            ``num_replicas`` (or ``mesh``).

    Raises:
        TypeError: If an argument has the wrong type (a bool where an int is meant, too).
        ValueError: If an argument is out of range, or ``rank``/``num_replicas`` contradict the
            mesh; the message names the argument and its value.

    Example: a dataset of 10 samples on ``num_replicas=4`` ranks, ``shuffle=False``
    (``total_size=12``; positions 10 and 11 are padding and hold samples 0 and 1 again)::

        drop_last=False: rank 0: [0, 4, 8]  rank 1: [1, 5, 9]  rank 2: [2, 6, 0]  rank 3: [3, 7, 1]
        drop_last=True:  rank 0: [0, 4]     rank 1: [1, 5]     rank 2: [2, 6]     rank 3: [3, 7]

    >>> s = DistributedSampler(range(10), num_replicas=4, rank=2, shuffle=False)
    >>> list(s), s.num_samples, s.total_size, s.samples_padded, s.padding_mask().tolist()
    ([2, 6, 0], 3, 12, 2, [False, False, True])

    With ``shuffle=True`` (the default) position ``p`` holds ``pi(p mod 10)`` for a keyed
    permutation ``pi`` of epoch 0 (``seed=7``); the padding repeats positions 0 and 1:

    >>> [list(DistributedSampler(range(10), 4, r, seed=7)) for r in range(4)]
    [[1, 6, 7], [0, 4, 2], [3, 9, 1], [8, 5, 0]]

    Checkpoint schema (after one index on each of the 4 ranks; bools are 0/1, ``layout.*`` is
    informational: the state loads on any ``num_replicas`` that divides ``consumed``):

    >>> t = DistributedSampler(range(10), num_replicas=4, rank=2, seed=7)
    >>> next(iter(t))
    3
    >>> t.state_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'format': 'dataorder.state', 'version': 1, 'kind': 'distributed',
     'fingerprint': 'ad45688b52889160', 'epoch': 0, 'consumed': 4,
     'config.compat': 'default', 'config.dataset_size': 10, 'config.shuffle': 1,
     'config.drop_last': 0, 'config.seed': 7, 'config.permutation_version': 1,
     'config.key_version': 1, 'layout.num_replicas': 4}
    """

    state_kind: ClassVar[str] = "distributed"
    #: The global order does not depend on ``num_replicas``: states load on another one.
    elastic: ClassVar[bool] = True
    #: The key of torchdata's ``StatefulDistributedSampler`` state (NOTE [ torchdata states ]).
    _YIELDED: ClassVar[str] = "yielded"

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        mesh: Any = None,
        dp_dims: Sequence[str] | None = None,
        compat: Literal["default", "torch"] = "default",
        topology: Topology | None = None,
    ) -> None:
        CursorSampler.__init__(self)
        self._n = _dataset_size(dataset)
        self._shuffle = check_bool("shuffle", shuffle)
        # Capped: the seed is stored in the state, which must stay within MAX_STATE_BYTES; the cap
        # is also torch's limit for manual_seed, which compat='torch' uses.
        self._seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        self._drop_last = check_bool("drop_last", drop_last)
        self._compat: Literal["default", "torch"] = check_choice(  # type: ignore[assignment]
            "compat", compat, COMPAT_MODES
        )
        self._order = _ORDERS[self._compat]()  # NOTE [ Index order strategies ]
        try:
            self._topology = resolve_topology(
                num_replicas, rank, mesh=mesh, dp_dims=dp_dims, topology=topology
            )
        except ValueError as err:
            if str(err).startswith("rank must be an int in [0, "):
                # torch's words too: code written for torch's sampler matches on them
                top = str(err)[len("rank must be an int in [0, ") :].split("]")[0]
                raise ValueError(
                    f"{err} (Invalid rank {rank}, rank should be in the interval [0, {top}])"
                ) from None
            raise
        self.dataset = dataset  # type: ignore[assignment]  # torch types it Dataset; only len() is used
        self._layout = distributed_layout(self._n, self._topology.dp_size, self._drop_last)

    # -- torch's attributes, read-only -----------------------------------------------------------
    @property
    def num_replicas(self) -> int:  # type: ignore[override]
        """Data-parallel size."""
        return self._topology.dp_size

    @property
    def rank(self) -> int:  # type: ignore[override]
        """This process's data-parallel rank."""
        return self._topology.dp_rank

    @property
    def shuffle(self) -> bool:  # type: ignore[override]
        """Whether each epoch is shuffled."""
        return self._shuffle

    @property
    def seed(self) -> int:  # type: ignore[override]
        """The shuffle seed."""
        return self._seed

    @property
    def drop_last(self) -> bool:  # type: ignore[override]
        """Whether the tail is cut (else padded by wrapping around)."""
        return self._drop_last

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """Indices every rank gets in a whole epoch (torch's ``num_samples``)."""
        return self._layout.num_batches

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Global positions in an epoch, padding included (torch's ``total_size``)."""
        return self._layout.total_positions

    @property
    def epoch(self) -> int:
        """The cursor's epoch. Assigning to it calls :meth:`set_epoch` (torch code does)."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.set_epoch(value)

    # NOTE [ torchdata states ]
    #     torchdata's StatefulDistributedSampler saves ``{"yielded": k}``: the indices this rank
    #     has handed out in the epoch the loop set. With ``compat="torch"`` (torch's order, which
    #     that sampler shares) such a state loads here: the cursor goes to position ``k x
    #     num_replicas`` of the current epoch, which is where torchdata's sampler continues. Our
    #     own states carry ``yielded`` in that mode too, so torchdata's sampler can load them:
    #     a job can switch either way between two checkpoints.

    @property
    def yielded(self) -> int:
        """Indices this rank has taken in the cursor's epoch (torchdata's attribute)."""
        return self._position["consumed"] // self.num_replicas

    @yielded.setter
    def yielded(self, value: int) -> None:
        self._load_torchdata({self._YIELDED: value})

    @property
    def next_yielded(self) -> int | None:
        """Where the next pass starts on this rank after a load, until it starts; else None
        (torchdata's attribute)."""
        if self._loaded and self._step is None:
            return self._origin["consumed"] // self.num_replicas
        return None

    def state_dict(self) -> dict[str, Scalar]:
        """The cursor (see :class:`~dataorder.core.cursor.CursorSampler`); with
        ``compat="torch"`` also torchdata's ``yielded`` (NOTE [ torchdata states ])."""
        state = super().state_dict()
        if self._compat == "torch":
            state[self._YIELDED] = self.yielded
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Place the cursor where ``state_dict`` says (see
        :meth:`~dataorder.core.cursor.CursorSampler.load_state_dict`). With ``compat="torch"``
        a torchdata ``StatefulDistributedSampler`` state ``{"yielded": k}`` loads too (NOTE
        [ torchdata states ]).

        Raises:
            ValueError: As the base class; also for a torchdata state without
                ``compat="torch"``, or a ``yielded`` outside ``[0, num_samples]``.
        """
        foreign = isinstance(state_dict, Mapping) and "format" not in state_dict
        if foreign and set(state_dict) == {self._YIELDED}:
            self._load_torchdata(state_dict)
            return
        if isinstance(state_dict, Mapping) and self._YIELDED in state_dict:
            ours = {k: v for k, v in state_dict.items() if k != self._YIELDED}
            epoch, progress = self._checked_state(ours)
            expected = progress["consumed"] // int(ours["layout.num_replicas"])
            if state_dict[self._YIELDED] != expected:
                raise ValueError(
                    f"state['yielded'] must be consumed // layout.num_replicas = {expected}; got "
                    f"state['yielded']={state_dict[self._YIELDED]!r}"
                )
            self._apply_state(epoch, progress)
            return
        super().load_state_dict(state_dict)

    def _load_torchdata(self, state: Mapping[str, Any]) -> None:
        if self._compat != "torch":
            raise ValueError(
                f"a torchdata StatefulDistributedSampler state ({dict(state)!r}) continues torch's "
                "order: build this sampler with compat='torch' to load it"
            )
        k = state[self._YIELDED]
        # torchdata's own words first, then our template
        if isinstance(k, int) and not isinstance(k, bool) and k < 0:
            raise ValueError(
                f"Cannot load state_dict with negative yielded value {k} (yielded must be an int "
                f"in [0, {self.num_samples}]; got yielded={k})"
            )
        k = check_int("yielded", k, min_value=0, max_value=self.num_samples)
        self._place(self._epoch, {"consumed": k * self.num_replicas}, loaded=True)

    # -- dataorder's attributes -------------------------------------------------------------------
    @property
    def compat(self) -> str:
        """``"default"`` or ``"torch"``."""
        return self._compat

    @property
    def topology(self) -> Topology:
        """Where this process sits: DP rank and size, and its replica group (TP x CP)."""
        return self._topology

    @property
    def layout(self) -> EpochLayout:
        """The epoch's global blocks (the same on every rank)."""
        return self._layout

    @property
    def samples_dropped(self) -> int:
        """Samples no rank reads in an epoch (``drop_last=True``), summed over ranks."""
        return self._layout.dropped

    @property
    def samples_padded(self) -> int:
        """Padding slots per epoch (repeats of the epoch's first samples), summed over ranks."""
        return self._layout.padded

    @property
    def num_padding(self) -> int:
        """How many of this rank's ``num_samples`` items in an epoch are padding.

        Padding positions are the last of the epoch, so they are the last items of each rank's
        epoch: rank ``r`` reads ``num_samples - num_padding`` real samples, then its padding.
        """
        real = max(0, -(-(self._n - self.rank) // self.num_replicas))
        return self.num_samples - min(self.num_samples, real)

    def padding_mask(self) -> npt.NDArray[np.bool_]:
        """A bool array over this rank's ``num_samples`` items of an epoch: True for padding.

        Item ``i`` is the ``i``-th index this rank yields from the start of an epoch; after a
        mid-epoch resume the next item is ``i = progress["consumed"] // num_replicas``. Use it to
        leave the wrap-around repeats out of evaluation metrics::

            mask = sampler.padding_mask()               # before the epoch's first batch
            for step, batch in enumerate(loader):       # loader built with batch_size=b
                keep = ~torch.from_numpy(mask[step * b:(step + 1) * b])
                metric.update(model(batch.x)[keep], batch.y[keep])
        """
        return np.arange(self.num_samples) >= self.num_samples - self.num_padding

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset_size={self._n}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self._shuffle}, seed={self._seed}, "
            f"drop_last={self._drop_last}, compat={self._compat!r}; epoch={self._epoch}, "
            f"consumed={self._position['consumed']})"
        )

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        *,
        rank: int = 0,
        dp_size: int | None = None,
        **_: Any,
    ) -> DistributedSampler:
        """Rebuild the sampler that wrote ``state`` (over ``range(dataset_size)``), on ``rank``.

        Args:
            state: A ``state_dict()`` of this class.
            rank: The data-parallel rank to build.
            dp_size: Another ``num_replicas`` (an elastic resume); default: the state's.

        Raises:
            ValueError: If the state is not a distributed sampler's, or this layout cannot
                continue it.
        """
        config, layout, _progress = split_state(state)
        if state.get("kind") != cls.state_kind:
            fail("state['kind']", repr(cls.state_kind), state.get("kind"))
        sampler = cls(
            range(config["dataset_size"]),  # type: ignore[call-overload]
            num_replicas=dp_size or layout["num_replicas"],  # type: ignore[arg-type]
            rank=rank,
            shuffle=bool(config["shuffle"]),
            seed=config["seed"],  # type: ignore[arg-type]
            drop_last=bool(config["drop_last"]),
            compat=config["compat"],  # type: ignore[arg-type]
        )
        sampler.load_state_dict(state)
        return sampler

    def describe_progress(self) -> list[tuple[str, str]]:
        """Where the cursor is, in torch's terms."""
        consumed, dp_size = self._position["consumed"], self.num_replicas
        return [
            (
                "position",
                f"{consumed} of {self.total_size} global positions of epoch {self._epoch}",
            ),
            (
                "indices",
                f"{consumed // dp_size} of {self.num_samples} done; {self.remaining} left on "
                "every rank",
            ),
        ]

    # -- CursorSampler --------------------------------------------------------------------------
    def order_config(self) -> dict[str, Scalar]:
        """Fields that fix the order and the end of the epoch (``compat`` first, for messages)."""
        return {
            "compat": self._compat,
            "dataset_size": self._n,
            "shuffle": int(self._shuffle),
            "drop_last": int(self._drop_last),
            "seed": self._seed,
            **self._order.versions(),
        }

    def layout_info(self) -> dict[str, int]:
        """``num_replicas`` (recorded, never the rank)."""
        return {"num_replicas": self.num_replicas}

    @property
    def dp_rank(self) -> int:
        """This process's data-parallel rank (the same as :attr:`rank`)."""
        return self._topology.dp_rank

    def _chunk_steps(self) -> int:
        return _CHUNK

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> BlockPlan[int]:
        dp_size = check_int("num_replicas", layout["num_replicas"], min_value=1)
        lay = (
            self._layout
            if dp_size == self.num_replicas
            else distributed_layout(self._n, dp_size, self._drop_last)
        )
        orders: list[Order] = []  # built at the first batch asked for, then shared by all ranks
        n = self._n

        def make_rows(rank: int) -> Callable[[npt.NDArray[np.int64]], list[int]]:
            def rows(positions: npt.NDArray[np.int64]) -> list[int]:
                if not orders:
                    orders.append(
                        self._order.epoch(n, seed=self._seed, epoch=epoch)
                        if self._shuffle
                        else (lambda places: places)
                    )
                out: list[int] = orders[0](positions.ravel() % n).tolist()
                return out

            return rows

        return BlockPlan(lay, "strided", make_rows)
