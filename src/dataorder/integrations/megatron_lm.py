"""Megatron-LM: a ``--dataloader-type external`` provider whose order is dataorder's.

Megatron-LM keeps no loader state. Its only data checkpoint is ``args.consumed_train_samples``
(and ``consumed_valid_samples``), a global count it adds ``global_batch_size`` to every
iteration, saves with ``args`` and restores in ``load_checkpoint``, before the data iterators are
built (``pretrain``: ``setup_model_and_optimizer``, then ``build_train_valid_test_data_iterators``).
It checks the tensor and pipeline sizes on resume, never the data-parallel size. With
``--dataloader-type external`` it hands the provider's return values to the loop unchanged
(``RerunDataIterator(x)``, which calls ``next(x)``), so the provider builds per-rank iterators.
What it reads is a :class:`LoaderRecipe`:

* map-style datasets, in Megatron's ``single`` or ``cyclic`` order (:class:`MapStyleData`; a
  plain function of the sample counts is wrapped in one); the count is in samples;
* :class:`BlendedData`: a weighted mixture of map-style sources
  (:class:`~dataorder.llm.blend.BlendedSampler`); samples;
* :class:`PackedData`: ``.idx``/``.bin`` corpora from a ``--data-path`` (one prefix, or weights
  and prefixes) packed into rows of ``seq_length`` tokens in Megatron's batch format
  (:class:`~dataorder.llm.packing.sampler.PackedSampler`,
  :class:`~dataorder.llm.packing.batch_styles.MegatronStyle`); the count is in **rows**.

Blends and packed corpora cut each source by ``--split`` (:func:`~dataorder.llm.splits.
split_documents`) and serve valid and test from :func:`~dataorder.llm.splits.held_out`
samplers, each at its own count::

    from dataorder.integrations.megatron_lm import PackedData, external_provider

    provider = external_provider(PackedData("0.3 /data/web 0.7 /data/code", seed=1234,
                                            split="969,30,1"))
    pretrain(provider, model_provider, ModelType.encoder_or_decoder, forward_step,
             args_defaults={"dataloader_type": "external"})

Each iterator is a :class:`EpochStream`: a ``DataLoader`` over a dataorder sampler placed at the
consumed count, which starts the next epoch itself when one ends (Megatron never calls
``set_epoch``, and its ``single`` loader would simply stop). Because the count is global and the
order does not depend on the data-parallel size, a job restarted on another number of GPUs reads
exactly the samples (rows) the first one had not (NOTE [ consumed_samples ] in
:mod:`dataorder.llm.megatron` says on which layouts a bare count is exact: with the run's
``global_batch_size``, on all of them). ``compat="megatron"`` reads Megatron-LM's own ``cyclic``
order instead (bound to the data-parallel size, as Megatron's is).

Megatron is imported only to read ``get_args()`` and the data-parallel rank when the caller
does not pass them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from dataorder._validate import check_choice, check_int, fail
from dataorder.integrations.common import import_peer
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.factory import DATALOADER_TYPES
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.packing.dataset import ConcatTokens, DocumentRange, MegatronTokens, PackedDataset
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import DEFAULT_CHUNK
from dataorder.llm.packing.sampler import PackedSampler
from dataorder.llm.splits import held_out, split_documents

__all__ = [
    "BlendedData",
    "EpochStream",
    "Loader",
    "LoaderRecipe",
    "MapStyleData",
    "PackedData",
    "external_provider",
    "parse_data_path",
]

INSTALL = "pip install megatron-core (and a Megatron-LM checkout on PYTHONPATH for get_args)"
_WHO = "dataorder.integrations.megatron_lm"


class EpochStream:
    """An iterator over a loader that goes on into the next epoch when one ends.

    Megatron's ``RerunDataIterator`` calls ``next()`` on it. At the end of an epoch the sampler
    is moved to the next one (``set_epoch(epoch + 1)``) and a new pass starts. An epoch with no
    batch at all ends the stream rather than spinning.

    Args:
        loader: A ``DataLoader`` over ``sampler`` (or the sampler itself).
        sampler: The dataorder sampler the loader reads.
    """

    def __init__(self, loader: Any, sampler: Any) -> None:
        self.loader = loader
        self.sampler = sampler
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> EpochStream:
        return self

    def __next__(self) -> Any:
        for _ in range(2):  # the rest of this epoch, then one fresh epoch
            if self._it is None:
                self._it = iter(self.loader)
            try:
                return next(self._it)
            except StopIteration:
                self._it = None
                self.sampler.set_epoch(self.sampler.epoch + 1)
        raise StopIteration

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state (exact with ``num_workers=0``; Megatron saves none anyway)."""
        return dict(self.sampler.state_dict())


def _megatron_args() -> Any:
    return import_peer("megatron.training", INSTALL, needed_by=_WHO).get_args()


def _megatron_dp() -> tuple[int, int]:
    mpu = import_peer("megatron.core.parallel_state", INSTALL, needed_by=_WHO)
    return mpu.get_data_parallel_rank(), mpu.get_data_parallel_world_size()


#: The splits Megatron's provider returns, in order.
_SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Loader:
    """One split's loader parts: a map-style dataset, the dataorder batch sampler that indexes
    it, and the collate (None: torch's default)."""

    dataset: Any
    sampler: Any
    collate_fn: Callable[[list[Any]], Any] | None = None


@runtime_checkable
class LoaderRecipe(Protocol):
    """What :func:`external_provider` builds the three splits from: the extension point.

    A recipe turns Megatron's ``args``, the data-parallel place and the three consumed counts
    (``consumed_train_samples``, ``consumed_valid_samples``, 0 for test) into one
    :class:`Loader` (or None) per split. :class:`MapStyleData` (single/cyclic),
    :class:`BlendedData` and :class:`PackedData` are the recipes here; another sampler family
    (a variable-length sampler, say) is one more class with this method, nothing else changes.
    """

    def loaders(
        self,
        args: Any,
        dp_rank: int,
        dp_size: int,
        consumed: tuple[int, int, int],
        num_samples: Any = None,
    ) -> tuple[Loader | None, Loader | None, Loader | None]:
        """The train, valid and test loaders, each placed at its consumed count.

        ``num_samples`` is what Megatron passes the provider (``train_val_test_num_samples``);
        a recipe whose datasets need it (:class:`MapStyleData`) passes it on, the others'
        samplers decide their own lengths.
        """
        ...


def _global_batch(args: Any, given: Any, who: str) -> Any:
    """The global batch size of a blend or a packed mixture: ``given``, else Megatron's
    ``args.global_batch_size`` (a ramp needs a schedule given: its batches are the quotas)."""
    if given is not None:
        return given
    if getattr(args, "rampup_batch_size", None):
        fail(
            f"{who}(global_batch_size=)",
            "a BatchSizeSchedule when Megatron ramps the batch size (--rampup-batch-size)",
            None,
            TypeError,
        )
    return args.global_batch_size


@dataclass(frozen=True)
class MapStyleData:
    """Map-style datasets read by Megatron's ``single`` or ``cyclic`` order (dataorder's, or
    Megatron-LM's own with ``compat="megatron"``); the count is in samples.

    Args:
        build_datasets: ``f(train_val_test_num_samples) -> (train, valid, test)`` map-style
            datasets (any may be None), called on every rank.
        order: ``"single"`` or ``"cyclic"``.
        seed: The cyclic order's seed.
        compat: ``"megatron"``: Megatron-LM's own cyclic order (``args.data_sharding``
            honoured; resumes only on the same data-parallel size, as Megatron's).
        collate_fn: The loaders' collate (default: torch's).
    """

    build_datasets: Callable[[Any], tuple[Any, Any, Any]]
    order: Literal["single", "cyclic"] = "cyclic"
    seed: int = 0
    compat: Literal["megatron"] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None

    def __post_init__(self) -> None:
        check_choice("order", self.order, DATALOADER_TYPES)
        if self.compat is not None and self.compat != "megatron":
            fail("compat", "None or 'megatron'", self.compat)
        if self.compat == "megatron" and self.order != "cyclic":
            fail(
                "order",
                "'cyclic' with compat='megatron' (its single order is the default's)",
                self.order,
            )

    def loaders(
        self,
        args: Any,
        dp_rank: int,
        dp_size: int,
        consumed: tuple[int, int, int],
        num_samples: Any = None,
    ) -> tuple[Loader | None, Loader | None, Loader | None]:
        """The datasets ``build_datasets(num_samples)`` makes, each behind its sampler."""
        datasets = self.build_datasets(num_samples)
        return tuple(  # type: ignore[return-value]
            None
            if ds is None
            else Loader(ds, self._sampler(ds, count, args, dp_rank, dp_size), self.collate_fn)
            for ds, count in zip(datasets, consumed, strict=True)
        )

    def _sampler(self, ds: Any, consumed: int, args: Any, dp_rank: int, dp_size: int) -> Any:
        # A run-wide count means the same position on every layout when the epoch ends on
        # whole global batches (NOTE [ consumed_samples ]); with a ramp too: the target global
        # batch size only decides where the epoch ends (every layout of the ramp divides it),
        # and without it a count past the first epoch would be refused, its epochs' lengths
        # depending on the layout.
        gbs = args.global_batch_size
        if self.compat == "megatron":
            return MegatronPretrainingRandomSampler(
                len(ds),
                args.micro_batch_size,
                dp_rank,
                dp_size,
                seed=self.seed,
                compat="megatron",
                data_sharding=bool(getattr(args, "data_sharding", True)),  # Megatron default
                consumed_samples=consumed,
                dataset=ds,
            )
        if self.order == "cyclic":
            return MegatronPretrainingRandomSampler(
                len(ds),
                args.micro_batch_size,
                dp_rank,
                dp_size,
                global_batch_size=gbs,
                seed=self.seed,
                consumed_samples=consumed,
            )
        return MegatronPretrainingSampler(
            len(ds),
            args.micro_batch_size,
            dp_rank,
            dp_size,
            global_batch_size=gbs,
            consumed_samples=consumed,
        )


@dataclass(frozen=True)
class BlendedData:
    """A weighted mixture of map-style sources (``--data-path 0.3 A 0.7 B`` over datasets),
    read by :class:`~dataorder.llm.blend.BlendedSampler`; the count is in samples.

    Each source is cut by ``split`` (Megatron's ``--split``, :func:`~dataorder.llm.splits.
    split_documents`) into train, valid and test index ranges; the valid and test samplers are
    :func:`~dataorder.llm.splits.held_out` twins of the train's (the same weights). A split
    whose ranges are empty in every source is None.

    Args:
        sources: The map-style datasets, one per source.
        weights: One weight per source, or a :class:`~dataorder.llm.mixture.MixtureSchedule`.
        seed: The blend's seed.
        split: Megatron's ``--split`` (default: everything is train).
        global_batch_size: An int or a :class:`~dataorder.llm.schedule.BatchSizeSchedule`
            (default: ``args.global_batch_size``).
        collate_fn: The loaders' collate (default: torch's).
    """

    sources: Sequence[Any]
    weights: Any
    seed: int = 0
    split: str | Sequence[float] = "1,0,0"
    global_batch_size: Any = None
    collate_fn: Callable[[list[Any]], Any] | None = None

    def __post_init__(self) -> None:
        given: object = self.sources
        if isinstance(given, str | bytes) or not isinstance(given, Sequence) or not given:
            fail("sources", "a non-empty sequence of map-style datasets", given, TypeError)
        split_documents(self.split, 0)

    def loaders(
        self,
        args: Any,
        dp_rank: int,
        dp_size: int,
        consumed: tuple[int, int, int],
        num_samples: Any = None,
    ) -> tuple[Loader | None, Loader | None, Loader | None]:
        """The blend over each split's document ranges (``split``), counted in samples;
        ``num_samples`` is not needed (the blend decides its length)."""
        import torch.utils.data

        ranges = [split_documents(self.split, len(src)) for src in self.sources]
        gbs = _global_batch(args, self.global_batch_size, "BlendedData")
        out: list[Loader | None] = []
        train: BlendedSampler | None = None
        for k in range(3):
            parts = [r[k] for r in ranges]
            if not any(parts):
                out.append(None)
                continue
            sizes = [len(r) for r in parts]
            if train is None:
                if k:
                    fail("split", "a split that gives the train documents", self.split)
                train = BlendedSampler(
                    sizes,
                    self.weights,
                    args.micro_batch_size,
                    dp_rank,
                    dp_size,
                    gbs,
                    seed=self.seed,
                    consumed_samples=consumed[0],
                )
                sampler = train
            else:
                sampler = held_out(train, sizes, consumed_samples=consumed[k])
            data: Any = torch.utils.data.ConcatDataset(
                [
                    torch.utils.data.Subset(src, r)
                    for src, r in zip(self.sources, parts, strict=True)
                ]
            )
            out.append(Loader(data, sampler, self.collate_fn))
        return out[0], out[1], out[2]


def parse_data_path(data_path: str | Sequence[str]) -> tuple[list[str], list[float] | None]:
    """Megatron's ``--data-path``: ``"A"``, ``"A B"`` (no weights) or ``"0.3 A 0.7 B"``.

    Returns:
        ``(prefixes, weights)``, ``weights`` None when the path gives none.

    Raises:
        ValueError: If weights and prefixes do not alternate or a weight is not a number.

    >>> parse_data_path("0.3 /data/web 0.7 /data/code")
    (['/data/web', '/data/code'], [0.3, 0.7])
    >>> parse_data_path(["/data/web"])
    (['/data/web'], None)
    """
    items = data_path.split() if isinstance(data_path, str) else list(data_path)
    if not items or not all(isinstance(x, str) and x for x in items):
        fail("data_path", "prefixes, or weight prefix pairs, as --data-path", data_path)

    def number(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None

    if number(items[0]) is None:
        if any(number(x) is not None for x in items):
            fail("data_path", "weight prefix pairs, or prefixes without weights", data_path)
        return items, None
    if len(items) % 2:
        fail("data_path", "weight prefix pairs (an even number of items)", data_path)
    weights = [number(x) for x in items[0::2]]
    if any(w is None or not w >= 0 for w in weights):
        fail("data_path", "non-negative weights before each prefix", data_path)
    return items[1::2], [float(w) for w in weights if w is not None]


@dataclass(frozen=True)
class PackedData:
    """Megatron ``.idx``/``.bin`` corpora (``--data-path``) packed into rows of
    ``args.seq_length`` tokens by :class:`~dataorder.llm.packing.sampler.PackedSampler`, in
    Megatron's batch format (:class:`~dataorder.llm.packing.batch_styles.MegatronStyle`); the
    count is in **rows** (a Megatron sample is a row of ``seq_length`` tokens, so
    ``consumed_train_samples`` counts rows as it counts ``GPTDataset`` samples).

    One prefix is one corpus; several are a mixture, weighted as ``--data-path`` says, or
    without weights each read once per epoch (weights: each corpus's rows per pass; Megatron's
    weightless blend reads every dataset whole too). Each corpus's documents are cut by
    ``split`` into train, valid and test ranges (:func:`~dataorder.llm.splits.split_documents`);
    valid and test are :func:`~dataorder.llm.splits.held_out` twins of the train sampler.

    Args:
        data_path: ``--data-path``: a string or its items (default: ``args.data_path``).
        seed: The packing's seed (default: ``args.seed``).
        split: Megatron's ``--split`` (default: ``args.split``, else everything is train).
        weights: Instead of the path's weights: one per prefix, or a
            :class:`~dataorder.llm.mixture.MixtureSchedule` over the rows trained (a schedule
            ``--data-path`` cannot say).
        style: ``"megatron"`` or a :class:`~dataorder.llm.packing.batch_styles.MegatronStyle`.
        packing: ``"overflow"`` (pretraining) or ``"never"`` (no document split).
        window, chunk, long_documents: As :class:`~dataorder.llm.packing.sampler.PackedSampler`.
        pad_id: The padding token (a valid token id).
        global_batch_size: An int or a :class:`~dataorder.llm.schedule.BatchSizeSchedule`
            (default: ``args.global_batch_size``).
    """

    data_path: str | Sequence[str] | None = None
    seed: int | None = None
    split: str | Sequence[float] | None = None
    weights: Any = None
    style: Any = "megatron"
    packing: Literal["overflow", "never"] = "overflow"
    window: int | None = None
    chunk: int = DEFAULT_CHUNK
    long_documents: Literal["truncate", "drop"] = "truncate"
    pad_id: int = 0
    global_batch_size: Any = None

    def __post_init__(self) -> None:
        if self.data_path is not None:
            parse_data_path(self.data_path)
        if self.split is not None:
            split_documents(self.split, 0)
        check_choice("packing", self.packing, ("overflow", "never"))
        check_choice("long_documents", self.long_documents, ("truncate", "drop"))

    def loaders(
        self,
        args: Any,
        dp_rank: int,
        dp_size: int,
        consumed: tuple[int, int, int],
        num_samples: Any = None,
    ) -> tuple[Loader | None, Loader | None, Loader | None]:
        """Packed rows of each split's document ranges, counted in rows; ``num_samples`` is
        not needed (the packing plan decides its length)."""
        data_path = getattr(args, "data_path", None) if self.data_path is None else self.data_path
        if data_path is None:
            fail("data_path", "given, or args.data_path (--data-path)", None, TypeError)
        prefixes, weights = parse_data_path(data_path)
        if self.weights is not None:
            weights = self.weights
        split = self.split if self.split is not None else getattr(args, "split", None) or "1,0,0"
        seed = self.seed if self.seed is not None else getattr(args, "seed", 0)
        tokens = [MegatronTokens(p) for p in prefixes]
        lengths = [DocumentLengths.from_megatron(p) for p in prefixes]
        ranges = [split_documents(split, len(x)) for x in lengths]
        seq_len = args.seq_length
        gbs = _global_batch(args, self.global_batch_size, "PackedData")
        options: dict[str, Any] = {
            "seed": seed,
            "split": self.packing,
            "window": self.window,
            "chunk": self.chunk,
            "long_documents": self.long_documents,
        }
        out: list[Loader | None] = []
        train: PackedSampler | None = None
        for k in range(3):
            parts = [r[k] for r in ranges]
            if not any(parts):
                out.append(None)
                continue
            lens = [x.slice(r.start, r.stop) for x, r in zip(lengths, parts, strict=True)]
            one = len(prefixes) == 1
            if train is None:
                if k:
                    fail("split", "a split that gives the train documents", split)
                train = self._train(
                    PackedSampler,
                    lens,
                    seq_len,
                    weights,
                    gbs,
                    args,
                    dp_rank,
                    dp_size,
                    options,
                    consumed[0],
                )
                sampler = train
            else:
                sampler = held_out(train, lens[0] if one else lens, consumed_samples=consumed[k])
            source: Any = (
                DocumentRange(tokens[0], parts[0].start, parts[0].stop)
                if one
                else ConcatTokens(
                    [DocumentRange(t, r.start, r.stop) for t, r in zip(tokens, parts, strict=True)]
                )
            )
            dataset = PackedDataset(source, seq_len, pad_id=self.pad_id, style=self.style)
            out.append(Loader(dataset, sampler, dataset.collate_fn))
        return out[0], out[1], out[2]

    @staticmethod
    def _train(
        packed: Any,
        lens: list[Any],
        seq_len: int,
        weights: Any,
        gbs: Any,
        args: Any,
        dp_rank: int,
        dp_size: int,
        options: dict[str, Any],
        consumed: int,
    ) -> Any:
        mbs = args.micro_batch_size
        if len(lens) == 1:
            return packed(
                lens[0], seq_len, mbs, dp_rank, dp_size, gbs, consumed_samples=consumed, **options
            )
        if weights is None:  # each corpus once per epoch: weights are its rows per pass
            probe = packed(
                None,
                seq_len,
                mbs,
                dp_rank,
                dp_size,
                gbs,
                mixture=(lens, [1] * len(lens)),
                **options,
            )
            weights = [float(p.rows_per_epoch) for p in probe.plans]
        return packed(
            None,
            seq_len,
            mbs,
            dp_rank,
            dp_size,
            gbs,
            mixture=(lens, weights),
            consumed_samples=consumed,
            **options,
        )


def external_provider(
    build_datasets: Callable[[Any], tuple[Any, Any, Any]] | LoaderRecipe,
    *,
    order: Literal["single", "cyclic"] | None = None,
    seed: int | None = None,
    compat: Literal["megatron"] | None = None,
    num_workers: int = 0,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    get_args: Callable[[], Any] | None = None,
    data_parallel: Callable[[], tuple[int, int]] | None = None,
) -> Callable[[Any], tuple[Any, Any, Any]]:
    """A ``train_valid_test_datasets_provider`` for ``--dataloader-type external``.

    Args:
        build_datasets: ``f(train_val_test_num_samples) -> (train, valid, test)`` map-style
            datasets (any may be None), called on every rank and read in ``order``
            (:class:`MapStyleData`); or a :class:`LoaderRecipe`: :class:`BlendedData`,
            :class:`PackedData`.
        order: With datasets: ``"single"`` (sequential, Megatron's ``single``) or ``"cyclic"``
            (shuffled, the default). None with a recipe (it has its sampler).
        seed: With datasets: the cyclic order's seed (default 0). None with a recipe.
        compat: With datasets: ``"megatron"``: Megatron-LM's own cyclic order
            (``args.data_sharding`` honoured; resumes only on the same data-parallel size, as
            Megatron's).
        num_workers: The loaders' worker processes.
        collate_fn: With datasets: the loaders' ``collate_fn`` (default: torch's).
        get_args: Returns Megatron's ``args`` (default: ``megatron.training.get_args``). Read:
            ``micro_batch_size``, ``global_batch_size``, ``consumed_train_samples``,
            ``consumed_valid_samples``, ``rampup_batch_size``, ``data_sharding``,
            ``seq_length`` (packed).
        data_parallel: Returns ``(dp_rank, dp_size)`` (default: Megatron's
            ``parallel_state``).

    Returns:
        The provider, with ``is_distributed = True`` (Megatron then calls it on every rank
        instead of only on tensor-parallel rank 0 and broadcasting). Each split it returns is
        an :class:`EpochStream` over a ``DataLoader`` whose batch sampler starts at Megatron's
        consumed count: samples for datasets and blends, rows for packed data.

    Raises:
        ValueError: For an unknown ``order`` or ``compat``, or one given with a recipe.
    """
    check_int("num_workers", num_workers, min_value=0)
    recipe: LoaderRecipe
    if isinstance(build_datasets, LoaderRecipe):
        for name, value in (("order", order), ("seed", seed), ("compat", compat)):
            if value is not None:
                fail(
                    name,
                    f"None with a recipe ({type(build_datasets).__name__} has its sampler)",
                    value,
                )
        if collate_fn is not None:
            fail("collate_fn", "None with a recipe (it has its collate)", collate_fn)
        recipe = build_datasets
    elif callable(build_datasets):
        recipe = MapStyleData(
            build_datasets,
            order="cyclic" if order is None else order,
            seed=0 if seed is None else seed,
            compat=compat,
            collate_fn=collate_fn,
        )
    else:
        fail(
            "build_datasets",
            "a function of the sample counts or a LoaderRecipe",
            build_datasets,
            TypeError,
        )
    read_args = get_args or _megatron_args
    read_dp = data_parallel or _megatron_dp

    def provider(train_val_test_num_samples: Any) -> tuple[Any, Any, Any]:
        import torch.utils.data

        args = read_args()
        dp_rank, dp_size = read_dp()
        consumed = (
            getattr(args, "consumed_train_samples", 0),
            getattr(args, "consumed_valid_samples", 0),
            0,
        )
        streams: list[EpochStream | None] = []
        for loader in recipe.loaders(args, dp_rank, dp_size, consumed, train_val_test_num_samples):
            if loader is None:
                streams.append(None)
                continue
            kwargs: dict[str, Any] = {"batch_sampler": loader.sampler, "num_workers": num_workers}
            if loader.collate_fn is not None:
                kwargs["collate_fn"] = loader.collate_fn
            data = torch.utils.data.DataLoader(loader.dataset, **kwargs)
            streams.append(EpochStream(data, loader.sampler))
        return streams[0], streams[1], streams[2]

    provider.is_distributed = True  # type: ignore[attr-defined]
    return provider
