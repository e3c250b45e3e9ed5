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
  skipping ``(global_step % update_steps_per_epoch) x gradient_accumulation_steps`` batches per
  rank of epoch ``global_step // update_steps_per_epoch`` (index-only, and exact when the order
  is a function of global position, as dataorder's is). The callback writes ``dataorder.json``
  into each checkpoint: the sampler's state *at the last optimizer step* (never the loader's
  read-ahead, NOTE [ The step's position ]) and the positions one optimizer step reads.
  ``train(resume_from_checkpoint=...)`` checks it first: another dataset or seed, or another
  global batch (``per-rank batch x world size x gradient accumulation``, with which the skip
  lands elsewhere in the epoch), is refused with a ``ValueError`` naming both values, and so is
  a resume whose epoch holds another number of optimizer steps (a short last batch that
  ``dataloader_drop_last`` drops at one per-device batch and not at another) or whose skip
  would not land on the recorded position. The same global batch on
  another number of processes, or split otherwise between per-device batch and accumulation,
  is exact.
* **What a batch holds.** ``remove_unused_columns`` (on by default) is honoured for a batch
  sampler as the stock Trainer honours it for its own: a ``datasets.Dataset`` loses the columns
  the model's ``forward`` does not take (``Trainer._remove_unused_columns``), any other dataset's
  items go through the Trainer's own collator wrapper (``_get_collator_with_removed_columns``).
  ``dataloader_drop_last`` cannot apply to a batch sampler (it decides its own last batch:
  pass ``drop_last=`` to it), so ``dataloader_drop_last=True`` with one is refused.

transformers is imported on first use of :data:`DataorderTrainer`, never on import.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from dataorder._validate import fail
from dataorder.integrations.common import import_peer, is_batch_sampler, lazy_classes

# DataorderTrainer is made on first use (module __getattr__), so it is not in __all__
__all__ = [
    "RECORD_VERSION",
    "STATE_FILE",
    "check_resume",
    "loader_batches",
    "positions_per_step",
    "resume_position",
    "step_state",
    "update_steps_per_epoch",
]

INSTALL = "pip install transformers accelerate"
_WHO = "dataorder.integrations.hf_trainer"

#: The file written into every Trainer checkpoint folder.
STATE_FILE = "dataorder.json"

#: The ``version`` of the ``dataorder.json`` written here: 2 records the sampler's state at the
#: checkpoint's last optimizer step. A record without ``version`` (0.3.0) holds the sampler's
#: own state at the save, the loader's read-ahead (NOTE [ The step's position ]).
RECORD_VERSION = 2

SamplerFn = Callable[[Any, int, int], Any]

# NOTE [ The step's position ]
#     A loader runs its sampler ahead of training: Accelerate's ``DataLoaderShard`` fetches the
#     next batch before it hands out the current one, and worker processes prefetch more. At a
#     checkpoint the sampler's own state is a micro-batch or more past the step the checkpoint
#     holds; another split of the same global batch (saved at 2 x accumulation 2, resumed at
#     4 x 1) cannot even represent that position. The Trainer itself resumes from
#     ``global_step`` alone: epoch ``global_step // U``, with ``(global_step % U) x accumulation``
#     batches of it done on every rank, where ``U = ceil(batches per epoch / accumulation)`` is
#     the update steps of an epoch. ``dataorder.json`` records the sampler's state at that very
#     position, written by the sampler itself (``state_at``: a pure function of the step, which
#     no read-ahead enters, every key included, such as a mixture's tag, which depends on the
#     position), and a resume loads it and checks that the new layout's skip lands on the same
#     position.


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


def loader_batches(sampler: Any, args: Any) -> int:
    """Batches one rank's training loader yields per epoch (the Trainer's ``len(dataloader)``).

    A batch sampler's own length; a per-index sampler's indices in batches of
    ``args.per_device_train_batch_size``, the last one dropped if short and
    ``args.dataloader_drop_last``.
    """
    if is_batch_sampler(sampler):
        return len(sampler)
    indices, per_device = len(sampler), int(args.per_device_train_batch_size)
    return indices // per_device if args.dataloader_drop_last else -(-indices // per_device)


def resume_position(sampler: Any, args: Any, global_step: int) -> tuple[int, int]:
    """Where ``Trainer.train(resume_from_checkpoint=...)`` resumes a checkpoint of
    ``global_step``: ``(epoch, batches of it done on every rank)`` (NOTE [ The step's position ]).

    With ``args.ignore_data_skip`` the Trainer skips nothing: the epoch's start.
    """
    per_epoch = update_steps_per_epoch(sampler, args)
    accumulation = int(args.gradient_accumulation_steps)
    done = 0 if args.ignore_data_skip else (global_step % per_epoch) * accumulation
    return global_step // per_epoch, done


def update_steps_per_epoch(sampler: Any, args: Any) -> int:
    """Optimizer steps of an epoch as the Trainer counts them: ``ceil(batches / accumulation)``
    (the last step of an epoch may accumulate fewer batches), at least 1."""
    accumulation = int(args.gradient_accumulation_steps)
    return max(-(-loader_batches(sampler, args) // accumulation), 1)


def step_state(sampler: Any, args: Any, global_step: int) -> dict[str, Any]:
    """The state of ``sampler`` after ``global_step`` optimizer steps, as the Trainer counts them.

    What ``dataorder.json`` records: the position of the checkpoint's last optimizer step, never
    the loader's read-ahead (NOTE [ The step's position ]). The cursor of ``sampler`` does not
    move.
    """
    epoch, done = resume_position(sampler, args, global_step)
    steps = done if is_batch_sampler(sampler) else done * int(args.per_device_train_batch_size)
    # the sampler's own state at the step, every key included (a mixture's tag depends on the
    # position): never its state_dict() with the position overwritten, which kept the tag of
    # the read-ahead
    return dict(sampler.state_at(epoch, min(steps, sampler.epoch_plan(epoch).num_steps)))


def _position(sampler: Any, state: Mapping[str, Any]) -> dict[str, Any]:
    epoch, progress = sampler.state_position(state)  # the cursor's reading, never the keys'
    return {"epoch": epoch, **progress}


def check_resume(checkpoint: str | os.PathLike[str], sampler: Any, args: Any) -> bool:
    """Check that a Trainer resume from ``checkpoint`` reads exactly what the run had not.

    ``sampler`` is a fresh sampler of the resumed run (not the one training reads).

    Checked in order, for a record of this version: the global batch; the saved state, loaded
    as it is (the sampler's own state at the last optimizer step, which the same global batch
    continues from on any split: its configuration, naming the field that differs, and what
    depends on the position, such as a mixture's trained part of the schedule); the optimizer
    steps of an epoch (a short last batch that ``dataloader_drop_last`` drops at one per-device
    batch and not at another changes them); and that the Trainer's skip on this layout lands on
    the recorded position. A 0.3.0 record (no ``version``) recorded the loader's read-ahead,
    not the step: its state is loaded as it is, or, when this split cannot continue from the
    read-ahead, its configuration alone at its epoch's start; then the global batch. Its
    position is not checked (the Trainer's skip, from ``global_step``, is exact anyway).

    Returns:
        False if the checkpoint has no ``dataorder.json`` (not written by
        :data:`DataorderTrainer`: nothing to check), else True.

    Raises:
        ValueError: If the checkpoint's ``dataorder.json`` is not what :data:`DataorderTrainer`
            writes (naming the file and the key), the sampler refuses the saved state (another
            dataset, seed or mode; the message names the field), the global batch changed
            or the steps of an epoch changed (naming both values), or the skip lands elsewhere
            (naming both positions).
    """
    path = os.path.join(os.fspath(checkpoint), STATE_FILE)
    if not os.path.isfile(path):
        return False
    saved = _read_state_file(path)
    if saved.get("version") != RECORD_VERSION:
        _load_read_ahead(sampler, saved["sampler"])
    _check_global_batch(checkpoint, saved, sampler, args)
    if saved.get("version") != RECORD_VERSION:
        return True  # 0.3.0 recorded the read-ahead and not the epoch's steps: nothing more
    # The record is the sampler's state at a step (step_state), which the same global batch
    # continues from on any split: loading it checks the configuration (naming the field that
    # differs) and what depends on the position (a mixture's trained part of the schedule).
    sampler.load_state_dict(saved["sampler"])
    steps = update_steps_per_epoch(sampler, args)
    if saved["update_steps_per_epoch"] != steps:
        raise ValueError(
            "an epoch must hold the same number of optimizer steps across a Trainer resume (the "
            "Trainer finds the epoch and the skip from global_step alone): the checkpoint "
            f"{os.fspath(checkpoint)!r} cut an epoch into {saved['update_steps_per_epoch']} "
            f"steps ({saved.get('describe', 'layout not recorded')}); got "
            f"update_steps_per_epoch={steps} ({_describe(sampler, args)}, "
            f"{loader_batches(sampler, args)} batches per epoch, dataloader_drop_last="
            f"{args.dataloader_drop_last}). Keep the split, or start "
            "a new run from the weights"
        )
    if not args.ignore_data_skip:
        _check_skip(checkpoint, saved, sampler, args)
    return True


def _check_global_batch(
    checkpoint: str | os.PathLike[str], saved: dict[str, Any], sampler: Any, args: Any
) -> None:
    """Refuse a resume whose samples per optimizer step differ from the checkpoint's."""
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


def _check_skip(
    checkpoint: str | os.PathLike[str], saved: dict[str, Any], sampler: Any, args: Any
) -> None:
    """Refuse a record whose global_step does not land where its state stopped, here."""
    recorded = _position(sampler, saved["sampler"])
    landing = _position(sampler, step_state(sampler, args, saved["global_step"]))
    if landing != recorded:
        raise ValueError(
            f"the Trainer's skip from global_step={saved['global_step']} lands at "
            f"{landing} on this layout ({_describe(sampler, args)}, "
            f"{loader_batches(sampler, args)} batches per epoch), but the checkpoint "
            f"{os.fspath(checkpoint)!r} stopped at {recorded}: the record does not describe "
            "its own global_step (edited, or copied from another checkpoint)"
        )


def _load_read_ahead(sampler: Any, state: Mapping[str, Any]) -> None:
    """Check a 0.3.0 record's state (the loader's read-ahead, NOTE [ The step's position ]).

    Loaded as it is (its configuration, and a mixture's tag, are checked at the position the
    tag describes). A read-ahead inside a global batch cannot be continued from on another
    split of it (saved at 2 x accumulation 2, resumed at 4 x 1): then its configuration alone
    is checked, at its epoch's start, where the Trainer's skip (from ``global_step``) is exact
    anyway; if that is refused too, the first refusal is raised.
    """
    try:
        sampler.load_state_dict(state)
    except ValueError as err:
        # NOTE: the one state this module edits: a 0.3.0 record, whose position is no step's
        at_start = {**state, **dict.fromkeys(sampler.progress_keys, 0)}
        try:
            sampler.load_state_dict(at_start)
        except ValueError:
            raise err from None


def _read_state_file(path: str) -> dict[str, Any]:
    """The ``dataorder.json`` at ``path``, checked to hold what :func:`check_resume` reads (a
    malformed file raised a bare KeyError or TypeError that named neither the file nor the key).

    Raises:
        ValueError: If the file is not JSON, not an object, or lacks ``"sampler"`` (an object)
            or ``"positions_per_step"`` (a positive int); or its ``"version"`` is neither
            absent (0.3.0) nor :data:`RECORD_VERSION`, or a record of this version lacks
            ``"global_step"`` (a non-negative int) or ``"update_steps_per_epoch"`` (a positive
            int); naming the file and the key.
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
    version = saved.get("version")
    if version is not None and version != RECORD_VERSION:
        fail(
            f"{path}['version']",
            f"{RECORD_VERSION} or absent (0.3.0), as this dataorder reads it",
            version,
        )
    if version == RECORD_VERSION:
        step = saved.get("global_step")
        if type(step) is not int or step < 0:
            fail(f"{path}['global_step']", f"a non-negative int ({writer})", step)
        steps = saved.get("update_steps_per_epoch")
        if type(steps) is not int or steps < 1:
            fail(f"{path}['update_steps_per_epoch']", f"a positive int ({writer})", steps)
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
                "version": RECORD_VERSION,
                # the last optimizer step's position, not the sampler's: the loader reads ahead
                "sampler": step_state(sampler, args, state.global_step),
                "positions_per_step": positions_per_step(sampler, args),
                "update_steps_per_epoch": update_steps_per_epoch(sampler, args),
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
            """The training loader, with Accelerate's re-sharding turned into a pass-through.

            Raises:
                ValueError: If the sampler is a batch sampler and ``dataloader_drop_last`` is
                    set (a batch sampler decides its own last batch).
            """
            import torch.utils.data

            sampler = self._build_sampler()
            if is_batch_sampler(sampler):
                if self.args.dataloader_drop_last:
                    raise ValueError(
                        "dataloader_drop_last applies to a per-index sampler; a dataorder batch "
                        f"sampler ({type(sampler).__name__}) decides its own last batch (pass "
                        "drop_last= to it); got dataloader_drop_last=True"
                    )
                self.dataorder_sampler = sampler
                dataset, collator = self._without_unused_columns(self.train_dataset)
                loader = torch.utils.data.DataLoader(
                    dataset,
                    batch_sampler=sampler,
                    collate_fn=collator,
                    num_workers=self.args.dataloader_num_workers,
                    pin_memory=self.args.dataloader_pin_memory,
                    persistent_workers=self.args.dataloader_persistent_workers,
                    multiprocessing_context=self.args.dataloader_multiprocessing_context,
                    prefetch_factor=self.args.dataloader_prefetch_factor,
                    in_order=self.args.dataloader_in_order,
                    worker_init_fn=functools.partial(
                        trainer_utils.seed_worker,
                        num_workers=self.args.dataloader_num_workers,
                        rank=self.args.process_index,
                    ),
                )
                loader = self.accelerator.prepare(loader)
            else:
                loader = super().get_train_dataloader()  # calls _get_train_sampler
            shard: Any = getattr(loader, "batch_sampler", None)
            if hasattr(shard, "num_processes"):  # Accelerate's BatchSamplerShard
                shard.num_processes = 1  # the sampler already gives this rank its share
                shard.process_index = 0
            return loader

        def _without_unused_columns(self, dataset: Any) -> tuple[Any, Any]:
            """``(dataset, collate_fn)`` as ``Trainer._get_dataloader`` makes them: with
            ``remove_unused_columns``, a ``datasets.Dataset`` without the columns the model's
            ``forward`` does not take, any other dataset's items filtered by the Trainer's
            collator wrapper."""
            collator = self.data_collator
            datasets = sys.modules.get("datasets")
            if datasets is not None and isinstance(dataset, datasets.Dataset):
                dataset = self._remove_unused_columns(dataset, description="Training")
            else:
                collator = self._get_collator_with_removed_columns(collator, description="Training")
            return dataset, collator

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
