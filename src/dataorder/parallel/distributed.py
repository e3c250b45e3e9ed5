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
import warnings
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

from dataorder._validate import check_bool, check_int, fail, is_zero_d
from dataorder.core.assembly import AssembledSampler, Field, Layout, Mode, Modes, Schema, flag
from dataorder.core.assembly import recorded as recorded_arg
from dataorder.core.batching import INDICES
from dataorder.core.blockplan import BlockPlan
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED, derive_key
from dataorder.core.partition import EpochBlocks, plan_epoch
from dataorder.core.permutation import MAX_DOMAIN, PERMUTATION_VERSION, Permutation
from dataorder.core.state import Scalar
from dataorder.core.topology import Topology, resolve_topology
from dataorder.parallel.compat_torch import TORCH_MODE

__all__ = [
    "COMPAT_MODES",
    "INDEX_MODES",
    "DistributedSampler",
    "IndexOrder",
    "KeyedOrder",
    "distributed_blocks",
    "epoch_order",
]

_STREAM = "distributed"
_CHUNK = 1 << 16  # positions per vectorised chunk: ~0.5 MB of int64, a few ms of work

Order = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


def distributed_blocks(dataset_size: int, num_replicas: int, drop_last: bool) -> EpochBlocks:
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
        The :class:`~dataorder.core.partition.EpochBlocks` (``per_rank=1``,
        ``dp_size=num_replicas``).
    """
    return plan_epoch(
        dataset_size, per_rank=1, dp_size=num_replicas, tail="drop" if drop_last else "pad"
    )


class IndexOrder(Protocol):
    """An order of the distributed sampler: which sample each global position of an epoch holds
    (an :class:`~dataorder.core.assembly.OrderStrategy`, the seed bound when it is built).

    NOTE [ Index order strategies ]: the keyed order here is the default; torch's exact order
    (``compat="torch"``) is :class:`dataorder.parallel.compat_torch.TorchOrder`. Chosen once when
    the sampler is built (:data:`INDEX_MODES`); nothing else branches on the mode.
    """

    @property
    def name(self) -> str:
        """The ``compat=`` value it answers to, recorded as ``config.compat``."""
        ...

    @property
    def elastic(self) -> bool:
        """Whether the global order is the same on every ``num_replicas``."""
        ...

    def epoch(self, dataset_size: int, epoch: int) -> Order:
        """The map of an epoch's positions (``< dataset_size``) to samples."""
        ...

    def config(self) -> dict[str, Scalar]:
        """Versions of the constructions the order uses, recorded in the configuration."""
        ...


class KeyedOrder:
    """Position ``p`` of epoch ``e`` holds ``pi_e(p)``: a :class:`~dataorder.core.permutation.
    Permutation` of the dataset keyed by ``derive_key(seed, epoch=e, stream="distributed",
    purpose="sample-order")``. O(1) to build, vectorised, nothing of size ``N``."""

    name = "default"
    elastic = True

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def epoch(self, dataset_size: int, epoch: int) -> Order:
        key = derive_key(self.seed, epoch=epoch, stream=_STREAM, purpose="sample-order")
        return Permutation(dataset_size, key)

    def config(self) -> dict[str, Scalar]:
        return {"permutation_version": PERMUTATION_VERSION, "key_version": KEY_DERIVATION_VERSION}


#: The orders of the distributed sampler, by ``compat=`` (NOTE [ Adding a sampler or a compat
#: mode ] in :mod:`dataorder.core.assembly`).
INDEX_MODES = Modes(
    family="DistributedSampler",
    field="compat",
    modes=(
        Mode(
            "default",
            build=KeyedOrder,
            records={"default": {"compat": "default"}},
            summary="dataorder's keyed order",
        ),
        TORCH_MODE,
    ),
)

#: Values of ``compat=``.
COMPAT_MODES: tuple[str, ...] = INDEX_MODES.names


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
    strategy: IndexOrder = INDEX_MODES.choose(compat).build(seed)
    if not shuffle:
        return lambda positions: positions % n
    order = strategy.epoch(n, epoch)
    return lambda positions: order(positions % n)


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


def _dataset_size_field() -> Field:
    def read(sampler: DistributedSampler) -> Scalar:
        return sampler.dataset_size

    def args(value: Scalar) -> Mapping[str, Any]:
        return {"dataset": range(check_int("state['config.dataset_size']", value, min_value=0))}

    return Field("dataset_size", read, args)


class DistributedSampler(AssembledSampler[int], _TorchDistributedSampler[int]):
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

    schema = Schema(
        kind="distributed",
        fields=(
            _dataset_size_field(),
            flag("shuffle"),
            flag("drop_last"),
            recorded_arg("seed"),
        ),
        layout=Layout(rank="rank", size="num_replicas"),
        batching=INDICES,
        modes=INDEX_MODES,
        steps="indices",
    )

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
        AssembledSampler.__init__(self)
        self._n = _dataset_size(dataset)
        self._shuffle = check_bool("shuffle", shuffle)
        # Capped: the seed is stored in the state, which must stay within MAX_STATE_BYTES; the cap
        # is also torch's limit for manual_seed, which compat='torch' uses.
        self._seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        self._drop_last = check_bool("drop_last", drop_last)
        mode = INDEX_MODES.choose(compat)  # NOTE [ Index order strategies ]
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
        self._strategy: IndexOrder = mode.build(self._seed)
        self.dataset = dataset  # type: ignore[assignment]  # torch types it Dataset; only len() is used
        self._blocks = distributed_blocks(self._n, self._topology.dp_size, self._drop_last)

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
        return self._blocks.num_batches

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Global positions in an epoch, padding included (torch's ``total_size``)."""
        return self._blocks.total_positions

    @property
    def epoch(self) -> int:
        """The cursor's epoch. Assigning to it calls :meth:`set_epoch` (torch code does)."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.set_epoch(value)

    @property
    def yielded(self) -> int:
        """Indices this rank has taken in the cursor's epoch (torchdata's attribute; NOTE
        [ torchdata states ] in :mod:`dataorder.parallel.compat_torch`)."""
        return self._position["consumed"] // self.num_replicas

    @yielded.setter
    def yielded(self, value: int) -> None:
        self.load_state_dict({"yielded": value})

    @property
    def next_yielded(self) -> int | None:
        """Where the next pass starts on this rank after a load, until it starts; else None
        (torchdata's attribute)."""
        if self._loaded and self._step is None:
            return self._origin["consumed"] // self.num_replicas
        return None

    # -- dataorder's attributes -------------------------------------------------------------------
    @property
    def compat(self) -> str:
        """``"default"`` or ``"torch"``."""
        return self._strategy.name

    @property
    def dataset_size(self) -> int:
        """Samples in the dataset."""
        return self._n

    @property
    def topology(self) -> Topology:
        """Where this process sits: DP rank and size, and its replica group (TP x CP)."""
        return self._topology

    @property
    def blocks(self) -> EpochBlocks:
        """The epoch's global blocks (the same on every rank)."""
        return self._blocks

    @property
    def layout(self) -> EpochBlocks:
        """Deprecated 0.2 name of :attr:`blocks` ("layout" is the data-parallel layout)."""
        warnings.warn(
            f"{type(self).__name__}.layout is deprecated; use .blocks", DeprecationWarning, 2
        )
        return self.blocks

    @property
    def samples_dropped(self) -> int:
        """Samples no rank reads in an epoch (``drop_last=True``), summed over ranks."""
        return self._blocks.dropped

    @property
    def samples_padded(self) -> int:
        """Padding slots per epoch (repeats of the epoch's first samples), summed over ranks."""
        return self._blocks.padded

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
            f"drop_last={self._drop_last}, compat={self.compat!r}; epoch={self._epoch}, "
            f"consumed={self._position['consumed']})"
        )

    # -- CursorSampler --------------------------------------------------------------------------
    @property
    def dp_rank(self) -> int:
        """This process's data-parallel rank (the same as :attr:`rank`)."""
        return self._topology.dp_rank

    def _chunk_steps(self) -> int:
        return _CHUNK

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> BlockPlan[int]:
        dp_size = check_int("num_replicas", layout["num_replicas"], min_value=1)
        lay = (
            self._blocks
            if dp_size == self.num_replicas
            else distributed_blocks(self._n, dp_size, self._drop_last)
        )
        orders: list[Order] = []  # built at the first batch asked for, then shared by all ranks
        n = self._n

        def make_rows(rank: int) -> Callable[[npt.NDArray[np.int64]], list[int]]:
            def rows(positions: npt.NDArray[np.int64]) -> list[int]:
                if not orders:
                    orders.append(
                        self._strategy.epoch(n, epoch) if self._shuffle else (lambda places: places)
                    )
                out: list[int] = orders[0](positions.ravel() % n).tolist()
                return out

            return rows

        return BlockPlan(lay, "strided", make_rows)


def __getattr__(name: str) -> Any:
    # ``distributed_layout``, the 0.2 name of :func:`distributed_blocks`, kept with a warning; to
    # be removed in 0.4
    if name == "distributed_layout":
        warnings.warn(
            "distributed_layout is deprecated; use distributed_blocks", DeprecationWarning, 2
        )
        return distributed_blocks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
