"""HF Transformers ``Trainer`` (tested: 5.24 with Accelerate 1.15) reading a dataorder sampler.

::

    from dataorder.integrations.hf_trainer import DataorderTrainer
    from dataorder.parallel.distributed import DistributedSampler

    trainer = DataorderTrainer(
        model=model, args=args, train_dataset=ds,
        sampler_fn=lambda ds, rank, world: DistributedSampler(
            ds, num_replicas=world, rank=rank, seed=1234),
    )
    trainer.train(resume_from_checkpoint=last_or_None)

What the subclass changes, and why (each is a way the stock Trainer loses data with a custom
sampler):

* **No double sharding.** ``accelerator.prepare`` wraps the loader's batch sampler in
  Accelerate's ``BatchSamplerShard``, which keeps every ``world_size``-th batch of what the
  rank-aware sampler already gave this rank: each rank trains on ``1 / world_size`` of its
  share. The wrapper is made a pass-through (the Trainer does the same for its own
  ``BatchRebalanceSampler``). A dataorder *batch* sampler (Megatron, blended, bucket, packed) goes
  into ``batch_sampler=`` of a loader built here, prepared the same way.
* **The epoch after a resume.** On a mid-epoch resume in epoch ``>= 1``, the Trainer's
  ``skip_first_batches`` loader hides the sampler from every ``set_epoch`` call, so the rest of
  the epoch would be read in epoch 0's order. A callback calls ``sampler.set_epoch`` at every
  ``on_epoch_begin``, before the Trainer builds its iterator.
* **The state with the checkpoint.** The Trainer saves no loader or sampler state; it resumes by
  skipping ``global_step x gradient_accumulation_steps`` batches per rank (index-only, and
  exact when the order is a function of global position, as dataorder's is). The callback
  writes ``dataorder.json`` (the sampler's state and the positions one optimizer step reads)
  into each checkpoint, and ``train(resume_from_checkpoint=...)`` checks it first: another
  dataset or seed, or another global batch (``per-rank batch x world size x gradient
  accumulation``, with which the skip lands elsewhere in the epoch), is refused with a
  ``ValueError`` naming both values. The same global batch on another number of processes is
  exact.

transformers is imported on first use of :data:`DataorderTrainer`, never on import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from dataorder._validate import fail
from dataorder.integrations.common import import_peer, is_batch_sampler, lazy_classes

# DataorderTrainer is made on first use (module __getattr__), so it is not in __all__
__all__ = ["STATE_FILE", "check_resume", "positions_per_step"]

INSTALL = "pip install transformers accelerate"
_WHO = "dataorder.integrations.hf_trainer"

#: The file written into every Trainer checkpoint folder.
STATE_FILE = "dataorder.json"

SamplerFn = Callable[[Any, int, int], Any]


def positions_per_step(sampler: Any, args: Any) -> int:
    """Global positions one optimizer step reads: per-rank batch x world size x accumulation.

    The per-rank batch of a batch sampler is its ``micro_batch_size`` (else its first batch's
    length); of a per-index sampler, ``args.per_device_train_batch_size``.
    """
    if is_batch_sampler(sampler):
        per_rank = getattr(sampler, "micro_batch_size", None)
        if per_rank is None:
            per_rank = len(sampler.batch_at(0))
    else:
        per_rank = args.per_device_train_batch_size
    return int(per_rank) * int(args.world_size) * int(args.gradient_accumulation_steps)


def check_resume(checkpoint: str | os.PathLike[str], sampler: Any, args: Any) -> bool:
    """Check that a Trainer resume from ``checkpoint`` reads exactly what the run had not.

    ``sampler`` is a fresh sampler of the resumed run (not the one training reads).

    Returns:
        False if the checkpoint has no ``dataorder.json`` (not written by
        :data:`DataorderTrainer`: nothing to check), else True.

    Raises:
        ValueError: If the checkpoint's ``dataorder.json`` is not what :data:`DataorderTrainer`
            writes (naming the file and the key), the sampler refuses the saved state (another
            dataset, seed or mode; the message names the field), or the global batch changed
            (naming both values).
    """
    path = os.path.join(os.fspath(checkpoint), STATE_FILE)
    if not os.path.isfile(path):
        return False
    saved = _read_state_file(path)
    sampler.load_state_dict(saved["sampler"])  # config check: names the field that differs
    now = positions_per_step(sampler, args)
    if saved["positions_per_step"] != now:
        raise ValueError(
            "the global batch must stay the same across a Trainer resume (the Trainer skips "
            "global_step x gradient_accumulation_steps batches per rank, which lands elsewhere "
            f"in the epoch otherwise): the checkpoint {os.fspath(checkpoint)!r} read "
            f"{saved['positions_per_step']} samples per optimizer step "
            f"({saved.get('describe', 'layout not recorded')}); got positions_per_step={now!r} "
            f"({_describe(sampler, args)}). Keep per-rank batch x world size x "
            "gradient_accumulation_steps, or start a new run from the weights"
        )
    return True


def _read_state_file(path: str) -> dict[str, Any]:
    """The ``dataorder.json`` at ``path``, checked to hold what :func:`check_resume` reads (a
    malformed file raised a bare KeyError or TypeError that named neither the file nor the key).

    Raises:
        ValueError: If the file is not JSON, not an object, or lacks ``"sampler"`` (an object)
            or ``"positions_per_step"`` (a positive int), naming the file and the key.
    """
    writer = "as DataorderTrainer writes it"
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} must hold JSON ({writer}); {err}") from err
    if not isinstance(saved, dict):
        raise ValueError(f"{path} must hold a JSON object ({writer}); got {saved!r:.80}")
    for key in ("sampler", "positions_per_step"):
        if key not in saved:
            raise ValueError(f"{path} must hold the key {key!r} ({writer}); got {sorted(saved)}")
    if not isinstance(saved["sampler"], dict):
        fail(f"{path}['sampler']", f"a JSON object ({writer})", saved["sampler"])
    per_step = saved["positions_per_step"]
    if type(per_step) is not int or per_step < 1:
        fail(f"{path}['positions_per_step']", f"a positive int ({writer})", per_step)
    return saved


def _describe(sampler: Any, args: Any) -> str:
    per_rank = positions_per_step(sampler, args) // (
        args.world_size * args.gradient_accumulation_steps
    )
    return (
        f"per-rank batch {per_rank} x world size {args.world_size} x "
        f"gradient_accumulation_steps {args.gradient_accumulation_steps}"
    )


def _trainer_class() -> type:
    transformers = import_peer("transformers", INSTALL, needed_by=_WHO)
    trainer_utils = import_peer("transformers.trainer_utils", INSTALL, needed_by=_WHO)

    class EpochSync(transformers.TrainerCallback):  # type: ignore[misc, name-defined]
        """``set_epoch`` at every epoch's start; ``dataorder.json`` into every checkpoint."""

        def __init__(self, trainer: Any) -> None:
            self.trainer = trainer

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sampler = self.trainer.dataorder_sampler
            if sampler is not None:
                # state.epoch is the epoch being resumed (a float: epoch + fraction done)
                sampler.set_epoch(int(state.epoch or 0))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sampler = self.trainer.dataorder_sampler
            if sampler is None or not state.is_world_process_zero:
                return
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            if not os.path.isdir(folder):
                return
            record = {
                "sampler": sampler.state_dict(),
                "positions_per_step": positions_per_step(sampler, args),
                "describe": _describe(sampler, args),
                "global_step": state.global_step,
            }
            tmp = os.path.join(folder, STATE_FILE + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.replace(tmp, os.path.join(folder, STATE_FILE))

    class DataorderTrainer(transformers.Trainer):  # type: ignore[misc, name-defined]
        """``Trainer`` reading ``sampler_fn(dataset, rank, world_size)`` (see the module doc).

        Args:
            sampler_fn: Builds this process's dataorder sampler (per-index or batch) from the
                training dataset, ``args.process_index`` and ``args.world_size``.
            *args, **kwargs: ``Trainer``'s.
        """

        def __init__(self, *args: Any, sampler_fn: SamplerFn, **kwargs: Any) -> None:
            self.sampler_fn = sampler_fn
            self.dataorder_sampler: Any = None
            callbacks = list(kwargs.pop("callbacks", None) or [])
            super().__init__(*args, callbacks=callbacks, **kwargs)
            self.add_callback(EpochSync(self))

        def _build_sampler(self, dataset: Any = None) -> Any:
            ds = self.train_dataset if dataset is None else dataset
            return self.sampler_fn(ds, self.args.process_index, self.args.world_size)

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            self.dataorder_sampler = self._build_sampler(train_dataset)
            return self.dataorder_sampler

        def get_train_dataloader(self) -> Any:
            """The training loader, with Accelerate's re-sharding turned into a pass-through."""
            import torch.utils.data

            sampler = self._build_sampler()
            if is_batch_sampler(sampler):
                self.dataorder_sampler = sampler
                loader = torch.utils.data.DataLoader(
                    self.train_dataset,
                    batch_sampler=sampler,
                    collate_fn=self.data_collator,
                    num_workers=self.args.dataloader_num_workers,
                    pin_memory=self.args.dataloader_pin_memory,
                )
                loader = self.accelerator.prepare(loader)
            else:
                loader = super().get_train_dataloader()  # calls _get_train_sampler
            shard: Any = getattr(loader, "batch_sampler", None)
            if hasattr(shard, "num_processes"):  # Accelerate's BatchSamplerShard
                shard.num_processes = 1  # the sampler already gives this rank its share
                shard.process_index = 0
            return loader

        def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
            """``Trainer.train``, after checking the checkpoint's ``dataorder.json``."""
            path = resume_from_checkpoint
            if path is True:
                path = trainer_utils.get_last_checkpoint(self.args.output_dir)
            if path:
                check_resume(path, self._build_sampler(), self.args)
            return super().train(resume_from_checkpoint, *args, **kwargs)

    return DataorderTrainer


# DataorderTrainer subclasses transformers.Trainer: this module imports without transformers
__getattr__ = lazy_classes(__name__, {"DataorderTrainer": _trainer_class})
