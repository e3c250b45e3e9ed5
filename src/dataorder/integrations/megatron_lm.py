"""Megatron-LM: a ``--dataloader-type external`` provider whose order is dataorder's.

Megatron-LM keeps no loader state. Its only data checkpoint is ``args.consumed_train_samples``
(and ``consumed_valid_samples``), a global count it adds ``global_batch_size`` to every
iteration, saves with ``args`` and restores in ``load_checkpoint``, before the data iterators are
built (``pretrain``: ``setup_model_and_optimizer``, then ``build_train_valid_test_data_iterators``).
It checks the tensor and pipeline sizes on resume, never the data-parallel size. With
``--dataloader-type external`` it hands the provider's return values to the loop unchanged
(``RerunDataIterator(x)``, which calls ``next(x)``), so the provider builds per-rank iterators::

    from dataorder.integrations.megatron_lm import external_provider

    def datasets(train_val_test_num_samples):
        return train_ds, valid_ds, None            # map-style datasets, as usual

    provider = external_provider(datasets, order="cyclic", seed=1234)
    pretrain(provider, model_provider, ModelType.encoder_or_decoder, forward_step,
             args_defaults={"dataloader_type": "external"})

Each iterator is a :class:`EpochStream`: a ``DataLoader`` over a dataorder Megatron sampler
placed at the consumed count, which starts the next epoch itself when one ends (Megatron never
calls ``set_epoch``, and its ``single`` loader would simply stop). Because the count is global
and the order does not depend on the data-parallel size, a job restarted on another number of
GPUs reads exactly the samples the first one had not (NOTE [ consumed_samples ] in
:mod:`dataorder.llm.megatron` says on which layouts a bare count is exact: with the run's
``global_batch_size``, on all of them). ``compat="megatron"`` reads Megatron-LM's own ``cyclic``
order instead (bound to the data-parallel size, as Megatron's is).

Megatron is imported only to read ``get_args()`` and the data-parallel rank when the caller
does not pass them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from dataorder._validate import check_choice, check_int, fail
from dataorder.integrations.common import import_peer
from dataorder.llm.factory import DATALOADER_TYPES

__all__ = ["EpochStream", "external_provider"]

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


def external_provider(
    build_datasets: Callable[[Any], tuple[Any, Any, Any]],
    *,
    order: Literal["single", "cyclic"] = "cyclic",
    seed: int = 0,
    compat: Literal["megatron"] | None = None,
    num_workers: int = 0,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    get_args: Callable[[], Any] | None = None,
    data_parallel: Callable[[], tuple[int, int]] | None = None,
) -> Callable[[Any], tuple[Any, Any, Any]]:
    """A ``train_valid_test_datasets_provider`` for ``--dataloader-type external``.

    Args:
        build_datasets: ``f(train_val_test_num_samples) -> (train, valid, test)`` map-style
            datasets (any may be None), called on every rank.
        order: ``"single"`` (sequential, Megatron's ``single``) or ``"cyclic"`` (shuffled).
        seed: The cyclic order's seed (the same on every rank).
        compat: ``"megatron"``: Megatron-LM's own cyclic order (``args.data_sharding``
            honoured; resumes only on the same data-parallel size, as Megatron's).
        num_workers: The loader's worker processes.
        collate_fn: The loader's ``collate_fn`` (default: torch's).
        get_args: Returns Megatron's ``args`` (default: ``megatron.training.get_args``). Read:
            ``micro_batch_size``, ``global_batch_size``, ``consumed_train_samples``,
            ``consumed_valid_samples``, ``rampup_batch_size``, ``data_sharding``.
        data_parallel: Returns ``(dp_rank, dp_size)`` (default: Megatron's
            ``parallel_state``).

    Returns:
        The provider, with ``is_distributed = True`` (Megatron then calls it on every rank
        instead of only on tensor-parallel rank 0 and broadcasting).

    Raises:
        ValueError: For an unknown ``order`` or ``compat``, naming it.
    """
    check_choice("order", order, DATALOADER_TYPES)
    if compat is not None and compat != "megatron":
        fail("compat", "None or 'megatron'", compat)
    if compat == "megatron" and order != "cyclic":
        fail("order", "'cyclic' with compat='megatron' (its single order is the default's)", order)
    check_int("num_workers", num_workers, min_value=0)
    read_args = get_args or _megatron_args
    read_dp = data_parallel or _megatron_dp

    def provider(train_val_test_num_samples: Any) -> tuple[Any, Any, Any]:
        args = read_args()
        dp_rank, dp_size = read_dp()
        train, valid, test = build_datasets(train_val_test_num_samples)
        consumed = (
            getattr(args, "consumed_train_samples", 0),
            getattr(args, "consumed_valid_samples", 0),
            0,
        )
        return tuple(  # type: ignore[return-value]
            None if ds is None else _stream(ds, count, args, dp_rank, dp_size)
            for ds, count in zip((train, valid, test), consumed, strict=True)
        )

    def _stream(ds: Any, consumed: int, args: Any, dp_rank: int, dp_size: int) -> EpochStream:
        import torch.utils.data

        from dataorder.llm.megatron import (
            MegatronPretrainingRandomSampler,
            MegatronPretrainingSampler,
        )

        # A run-wide count means the same position on every layout when the epoch ends on
        # whole global batches (NOTE [ consumed_samples ]); with a ramp too: the target global
        # batch size only decides where the epoch ends (every layout of the ramp divides it),
        # and without it a count past the first epoch would be refused, its epochs' lengths
        # depending on the layout.
        gbs = args.global_batch_size
        sampler: Any
        if compat == "megatron":
            sampler = MegatronPretrainingRandomSampler(
                len(ds),
                args.micro_batch_size,
                dp_rank,
                dp_size,
                seed=seed,
                compat="megatron",
                data_sharding=bool(getattr(args, "data_sharding", True)),  # Megatron default
                consumed_samples=consumed,
                dataset=ds,
            )
        elif order == "cyclic":
            sampler = MegatronPretrainingRandomSampler(
                len(ds),
                args.micro_batch_size,
                dp_rank,
                dp_size,
                global_batch_size=gbs,
                seed=seed,
                consumed_samples=consumed,
            )
        else:
            sampler = MegatronPretrainingSampler(
                len(ds),
                args.micro_batch_size,
                dp_rank,
                dp_size,
                global_batch_size=gbs,
                consumed_samples=consumed,
            )
        kwargs: dict[str, Any] = {"batch_sampler": sampler, "num_workers": num_workers}
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        return EpochStream(torch.utils.data.DataLoader(ds, **kwargs), sampler)

    provider.is_distributed = True  # type: ignore[attr-defined]
    return provider
