"""Held-out data: Megatron's ``--split`` as document ranges, and a train sampler's twin over them.

Megatron-LM evaluates every ``--eval-interval`` iterations on a valid split. With ``--split
969,30,1`` its ``BlendedMegatronDatasetBuilder`` cuts each corpus's documents into three
contiguous ranges (train, valid, test) and builds one ``GPTDataset`` per range.
:func:`split_documents` computes the same ranges; :func:`held_out` builds the sampler of a held-out
range (or of another corpus) from the train sampler's configuration.

NOTE [ Held-out samplers ]
    A held-out sampler is a sampler of its own, built by the same class from the same
    configuration (packing, seed, batching, weights) over other documents: the same order
    machinery, deterministic, with its own cursor. Reading it never moves the train sampler,
    and its state (Megatron's ``consumed_valid_samples``) is its own, refused by the train
    sampler (other lengths: another fingerprint). Nothing is threaded through the samplers: a
    held-out split is only other lengths.

Example: the valid rows of documents 90-99 of a corpus packed as the train's:

    >>> from dataorder.llm.packing import PackedSampler
    >>> lengths = [5, 3, 9, 2, 7] * 20
    >>> train_docs, valid_docs, _ = split_documents("90,10,0", len(lengths))
    >>> train_docs, valid_docs
    (range(0, 90), range(90, 100))
    >>> train = PackedSampler(lengths[:90], 8, 2, 0, 1, seed=0, chunk=1, window=5)
    >>> valid = held_out(train, lengths[90:])
    >>> valid.total_rows, valid.seq_len, valid.seed
    (7, 8, 0)

Rows of a held-out range number its documents from 0: read them through
:class:`~dataorder.llm.packing.dataset.DocumentRange` (``PackedDataset(DocumentRange(tokens,
90, 100), ...)``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.sampler import PackedSampler
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = ["SPLITS", "held_out", "split_documents"]

#: Megatron's splits, in ``--split`` order.
SPLITS: tuple[str, str, str] = ("train", "valid", "test")

_Sampler = TypeVar("_Sampler", PackedSampler, BlendedSampler)


def _split_weights(split: object) -> list[float]:
    if isinstance(split, str):
        if not re.fullmatch(r"\s*[0-9.]+(\s*[,/]\s*[0-9.]+){0,2}\s*", split):
            fail("split", "up to three non-negative numbers such as '969,30,1'", split)
        try:
            parts = [float(x) for x in re.findall(r"[0-9.]+", split)]
        except ValueError:
            fail("split", "up to three non-negative numbers such as '969,30,1'", split)
    elif isinstance(split, Sequence) and 1 <= len(split) <= 3:
        parts = []
        for i, x in enumerate(split):
            if isinstance(x, bool) or not isinstance(x, int | float) or not x >= 0:
                fail(f"split[{i}]", "a non-negative number", x, TypeError)
            parts.append(float(x))
    else:
        fail("split", "a string such as '969,30,1' or up to three weights", split, TypeError)
    parts += [0.0] * (3 - len(parts))
    total = sum(parts)
    if not 0 < total < float("inf"):
        fail("split", "weights with a positive, finite sum", split)
    return [x / total for x in parts]


def split_documents(split: str | Sequence[float], num_documents: int) -> tuple[range, range, range]:
    """The ``(train, valid, test)`` document ranges of ``--split`` over ``num_documents``.

    As megatron-core's builder: the weights are normalised, their running sums ``c_k`` are the
    book-ends, and split ``k`` holds documents ``[round(c_{k-1} n), round(c_k n))`` (Python's
    ``round``, in floats, so the ranges are Megatron's to the document).

    Args:
        split: ``"969,30,1"`` (commas or slashes; fewer than three weights are padded with 0)
            or a sequence of up to three non-negative weights.
        num_documents: The corpus's documents.

    Returns:
        Three contiguous ``range`` s covering ``range(num_documents)``.

    Raises:
        TypeError, ValueError: For a bad ``split`` or ``num_documents``, naming it.

    >>> split_documents("969,30,1", 1000)
    (range(0, 969), range(969, 999), range(999, 1000))
    """
    n = check_int("num_documents", num_documents, min_value=0)
    weights = _split_weights(split)
    ends = [0.0]
    for w in weights:
        ends.append(ends[-1] + w)
    cut = [round(c * float(n)) for c in ends]
    cut[-1] = n  # the running sum may miss 1.0 by a rounding
    return range(cut[0], cut[1]), range(cut[1], cut[2]), range(cut[2], cut[3])


def held_out(
    train: _Sampler,
    data: DocumentLengths | npt.ArrayLike | Sequence[Any],
    *,
    consumed_samples: int = 0,
    micro_batch_size: int | None = None,
    global_batch_size: int | BatchSizeSchedule | None = None,
    data_parallel_rank: int | None = None,
    data_parallel_size: int | None = None,
) -> _Sampler:
    """A sampler over held-out data, configured as ``train`` (NOTE [ Held-out samplers ]).

    Args:
        train: The train :class:`~dataorder.llm.packing.sampler.PackedSampler` or
            :class:`~dataorder.llm.blend.BlendedSampler`.
        data: For a packed sampler of one corpus, the held-out documents' lengths; of a
            blend of packed sources, one lengths per source (the same mixture); for a
            :class:`~dataorder.llm.blend.BlendedSampler`, one size per source.
        consumed_samples: Where the held-out sampler starts, a run-wide count (Megatron's
            ``consumed_valid_samples``: rows for a packed sampler, samples for a blend).
        micro_batch_size: Default: the train's (Megatron's ``--eval-micro-batch-size`` if
            given).
        global_batch_size: Default: the train's (a batch-size schedule is not reused: give an
            int then).
        data_parallel_rank, data_parallel_size: Default: the train's.

    Returns:
        A new sampler of the train's class; ``train`` is not touched.

    Raises:
        TypeError: If ``train`` is not one of the two samplers.
        ValueError: If the held-out data cannot fill one global batch (named by the sampler).
    """
    if not isinstance(train, PackedSampler | BlendedSampler):
        fail("train", "a PackedSampler or a BlendedSampler", type(train).__name__, TypeError)
    mbs = train.micro_batch_size if micro_batch_size is None else micro_batch_size
    rank = train.data_parallel_rank if data_parallel_rank is None else data_parallel_rank
    size = train.data_parallel_size if data_parallel_size is None else data_parallel_size
    if isinstance(train, PackedSampler):
        gbs: Any = global_batch_size
        if gbs is None:
            field = train.global_batch_size_field
            if isinstance(field, str):
                fail("global_batch_size", "given when the train's is a schedule", None, TypeError)
            gbs = field or None
        common: dict[str, Any] = {
            "seed": train.seed,
            "split": train.split,
            "window": train.window,
            "chunk": train.chunk,
            "long_documents": train.long_documents,
            "consumed_samples": consumed_samples,
        }
        if train.mixture is None:
            return PackedSampler(
                data,
                train.seq_len,
                mbs,
                rank,
                size,
                gbs,
                drop_last=train.drop_last,
                pad_samples_to_global_batch_size=train.pad_samples_to_global_batch_size,
                **common,
            )
        if isinstance(data, str | bytes) or not isinstance(data, Sequence):
            fail("data", "one lengths per source of the train's mixture", data, TypeError)
        return PackedSampler(
            None, train.seq_len, mbs, rank, size, gbs, mixture=(data, train.mixture), **common
        )
    if global_batch_size is None:
        thresholds = train.batch_size_schedule.thresholds
        if len(thresholds) != 1:
            fail("global_batch_size", "given when the train's is a schedule", None, TypeError)
        global_batch_size = thresholds[0][1]
    # A blend over a MixtureLog follows the same log (its compiled form is the train's own).
    mixture = train.schedule
    # (a LogMixture is only compiled from a MixtureLog: its log is one)
    weights = cast(MixtureLog, mixture.log) if isinstance(mixture, LogMixture) else mixture
    return BlendedSampler(
        data,  # type: ignore[arg-type]
        weights,
        mbs,
        rank,
        size,
        global_batch_size,
        seed=train.seed,
        consumed_samples=consumed_samples,
    )
