"""The loop recipes: a sampler's promises, checked in the training loops people actually run.

A sampler that is exact when driven directly can still lose or repeat data in a loop: a
DataLoader's workers run it ahead, torchdata's ``StatefulDataLoader`` snapshots it, HF
Accelerate reads one batch ahead, Lightning sizes an epoch by ``len()``, and people peek with
``next(iter(loader))``. Each recipe here runs a short multi-epoch job the way its framework is
documented to be used (docs/integrations.md) and requires two things:

* the uninterrupted run trains exactly the sampler's epochs (what a plain ``DataLoader`` without
  workers reads), so a loader that cuts or stretches an epoch fails even without a resume;
* resumed from every checkpoint, in a fresh loader and sampler, the run continues exactly:
  its ``(epoch, batch)`` sequence equals the rest of the uninterrupted one.

The checkpoints are taken after **every** batch, between ``set_epoch`` and an epoch's first batch
(a loader's state is then still the last epoch's), and after each epoch's loop twice: with the
loop's epoch, and with the next one (loops that resume at ``e + 1`` after a finished epoch:
Accelerate's ``epoch_{e}`` folders, ``global_step // len(loader)``).

================  ==========================================================================
recipe            the loop
================  ==========================================================================
``dataloader``    ``torch.utils.data.DataLoader`` (no workers); checkpoint
                  ``{"epoch": e, "sampler": sampler.state_dict()}``
``stateful-0``    torchdata ``StatefulDataLoader``, no workers; checkpoint
                  ``{"epoch": e, "loader": loader.state_dict()}``
``stateful-2``    the same with two worker processes (the sampler runs ahead)
``snapshot-2``    ``StatefulDataLoader(snapshot_every_n_steps=2)`` with a worker: the state is
                  a snapshot plus batches to replay
``read-ahead``    ``StatefulDataLoader`` read one batch ahead, the state taken before each
                  read-ahead and again when it hits the end (what Accelerate does)
``no-set-epoch``  ``StatefulDataLoader`` in a loop that never calls ``set_epoch`` (Megatron's)
``accelerate``    HF Accelerate's ``prepare_data_loader(..., use_stateful_dataloader=True)``,
                  ``loader.set_epoch(e)`` each epoch; ``accelerate-workers`` the same with a
                  worker process (Accelerate starts the loader before it calls ``set_epoch``)
``lightning``     PyTorch Lightning ``Trainer.fit`` with a ``StatefulDataLoader``, a checkpoint
                  every step, resumed with ``fit(ckpt_path=...)``; ``lightning-reload`` the
                  same with ``reload_dataloaders_every_n_epochs=1``; ``lightning-workers`` with
                  a worker process, resumed from every checkpoint but those at an epoch's last
                  step (Lightning then runs the restored loader, whose workers have already
                  read the finished epoch, as the next epoch: torchdata's samplers lose it too)
``peek``          ``next(iter(loader))`` before the loop, for ``DataLoader`` and
                  ``StatefulDataLoader`` with 0, 2 and 4 workers, and inside the loop
                  mid-epoch (no workers): the run is unchanged
================  ==========================================================================

The worker recipes use one worker with ``prefetch_factor=1`` unless said otherwise, so a loader
that reads ahead of ``set_epoch`` shows within an epoch of two batches.

Every recipe checkpoints with the loop's own epoch, which is what most loops save. A per-index
sampler is batched by the loader with ``case.loader_batch_size`` and both ``drop_last`` values;
a batch sampler goes in ``batch_sampler=``. Recipes whose framework is not installed are skipped
(:func:`check_loop_recipes` returns the names of those that ran).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dataorder.testing.contract import ContractViolation, SamplerCase

__all__ = ["RECIPES", "WORKER_RECIPES", "available_recipes", "check_loop_recipes"]

#: Every recipe, in the order :func:`check_loop_recipes` runs them.
RECIPES: tuple[str, ...] = (
    "dataloader",
    "stateful-0",
    "stateful-2",
    "snapshot-2",
    "read-ahead",
    "no-set-epoch",
    "peek",
    "accelerate",
    "accelerate-workers",
    "lightning",
    "lightning-reload",
    "lightning-workers",
)

#: The recipes whose loaders run worker processes: each costs seconds per case.
WORKER_RECIPES: tuple[str, ...] = (
    "stateful-2",
    "snapshot-2",
    "accelerate-workers",
    "lightning-workers",
)

_NEEDS = {
    "stateful-0": "torchdata",
    "stateful-2": "torchdata",
    "snapshot-2": "torchdata",
    "read-ahead": "torchdata",
    "no-set-epoch": "torchdata",
    "peek": "torchdata",
    "accelerate": "accelerate",
    "accelerate-workers": "accelerate",
    "lightning": "lightning",
    "lightning-reload": "lightning",
    "lightning-workers": "lightning",
}

#: Epochs every recipe runs.
EPOCHS = 3

#: A loader's options in the worker recipes: one worker, one batch in flight.
_ONE_WORKER: dict[str, Any] = {"workers": 1, "prefetch_factor": 1}

Record = tuple[int, tuple[Any, ...]]


def available_recipes() -> tuple[str, ...]:
    """The recipes whose frameworks are importable here."""
    found = {}
    for name in RECIPES:
        module = _NEEDS.get(name, "torch")
        if module not in found:
            found[module] = importlib.util.find_spec(module) is not None
    return tuple(name for name in RECIPES if found[_NEEDS.get(name, "torch")])


class _SlotDataset:
    """``dataset[slot] == slot``: what a loader reads is the slot itself, whatever the batching
    rule makes of a slot (an index, ``None``, a packed row)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, slot: Any) -> Any:
        return int(slot) if isinstance(slot, int) else slot


def _collate(batch: Sequence[Any]) -> list[Any]:
    return list(batch)


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


def _record(epoch: int, batch: Any) -> Record:
    values = batch.tolist() if hasattr(batch, "tolist") else batch
    return epoch, tuple(values)


def _batched(case: SamplerCase) -> bool:
    """Whether the case's items are batches, as the contract checks read them: through the
    sampler's batching rule (``case.batched`` only for a sampler without one)."""
    return case.rule(case.make(case.dp_size - 1, case.dp_size)).batched


class _Job:
    """How one recipe builds its loader for one case and one loader ``drop_last``."""

    def __init__(self, case: SamplerCase, recipe: str, drop_last: bool) -> None:
        self.case = case
        self.recipe = recipe
        self.drop_last = drop_last
        self.rank = case.dp_size - 1  # the last rank: the one that meets padding first
        self.batched = _batched(case)

    def sampler(self) -> Any:
        return self.case.make(self.rank, self.case.dp_size)

    def loader(
        self, sampler: Any, *, workers: int = 0, stateful: bool = True, **options: Any
    ) -> Any:
        import torch.utils.data

        dataset: Any = _SlotDataset(self.case.dataset_size)
        kwargs: dict[str, Any] = {"collate_fn": _collate, "num_workers": workers, **options}
        if self.batched:
            kwargs["batch_sampler"] = sampler
        elif stateful:
            from torchdata.stateful_dataloader.sampler import BatchSampler

            kwargs["batch_sampler"] = BatchSampler(
                sampler, self.case.loader_batch_size, self.drop_last
            )
        else:
            kwargs.update(
                sampler=sampler, batch_size=self.case.loader_batch_size, drop_last=self.drop_last
            )
        if not stateful:
            return torch.utils.data.DataLoader(dataset, **kwargs)
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, **kwargs)


# -- the loops --------------------------------------------------------------------------------
# Each loop runs from ``start`` (a checkpoint, or None) to the end of the job and returns the
# records it trained on, plus the checkpoints it took: (records before it, checkpoint).
Checkpoint = dict[str, Any]
Loop = Callable[[_Job, Checkpoint | None], tuple[list[Record], list[tuple[int, Checkpoint]]]]


def _epoch_loop(
    job: _Job,
    start: Checkpoint | None,
    *,
    make: Callable[[Any], Any],
    save: Callable[[Any, Any], Any],
    load: Callable[[Any, Any, Any], None],
    set_epoch: bool = True,
    batches: Callable[[Any, Any], Iterator[tuple[Any, Callable[[], Any]]]] | None = None,
) -> tuple[list[Record], list[tuple[int, Checkpoint]]]:
    """``for e in range(saved, EPOCHS): set_epoch(e); for batch in loader: train; save``."""
    sampler = job.sampler()
    loader = make(sampler)
    first = 0
    if start is not None:
        load(sampler, loader, start["state"])
        first = start["epoch"]
    records: list[Record] = []
    checkpoints: list[tuple[int, Checkpoint]] = []
    for epoch in range(first, EPOCHS):
        if set_epoch:
            accelerate = job.recipe.startswith("accelerate")
            target = getattr(loader, "set_epoch", None) if accelerate else None
            (target or sampler.set_epoch)(epoch)
            # before the epoch's first batch: the loader's state still describes the last epoch
            checkpoints.append((len(records), {"epoch": epoch, "state": save(sampler, loader)}))
        pairs = batches(loader, sampler) if batches is not None else _plain(loader, sampler)
        for batch, state in pairs:
            records.append(_record(epoch, batch))
            checkpoints.append((len(records), {"epoch": epoch, "state": state()}))
        # after the epoch's loop, with the loop's own epoch, and with the next one
        state = save(sampler, loader)
        checkpoints.append((len(records), {"epoch": epoch, "state": state}))
        if set_epoch and epoch + 1 < EPOCHS:
            checkpoints.append((len(records), {"epoch": epoch + 1, "state": state}))
    return records, checkpoints


def _plain(loader: Any, sampler: Any) -> Iterator[tuple[Any, Callable[[], Any]]]:
    for batch in loader:
        yield batch, loader.state_dict


def _sampler_state(loader: Any, sampler: Any) -> Iterator[tuple[Any, Callable[[], Any]]]:
    """A plain DataLoader has no state: the checkpoint is the sampler's own (no workers)."""
    for batch in loader:
        yield batch, sampler.state_dict


def _read_ahead(loader: Any, sampler: Any) -> Iterator[tuple[Any, Callable[[], Any]]]:
    """Accelerate's DataLoaderShard: one batch ahead, the state taken before each read-ahead."""
    it = iter(loader)
    try:
        current = next(it)
    except StopIteration:
        return
    while True:
        state = loader.state_dict()
        try:
            upcoming = next(it)
        except StopIteration:
            yield current, _const(loader.state_dict())
            return
        yield current, _const(state)
        current = upcoming


def _loop_for(recipe: str) -> Loop:
    if recipe == "dataloader":
        return lambda job, start: _epoch_loop(
            job,
            start,
            make=lambda s: job.loader(s, stateful=False),
            save=lambda s, loader: s.state_dict(),
            load=lambda s, loader, state: s.load_state_dict(state),
            batches=_sampler_state,
        )
    if recipe in ("stateful-0", "stateful-2", "snapshot-2", "read-ahead", "no-set-epoch"):
        options: dict[str, Any] = {}
        if recipe == "stateful-2":
            options["workers"] = 2
        if recipe == "snapshot-2":
            options.update(_ONE_WORKER, snapshot_every_n_steps=2)
        return lambda job, start: _epoch_loop(
            job,
            start,
            make=lambda s: job.loader(s, **options),
            save=lambda s, loader: loader.state_dict(),
            load=lambda s, loader, state: loader.load_state_dict(state),
            set_epoch=recipe != "no-set-epoch",
            batches=_read_ahead if recipe == "read-ahead" else None,
        )
    if recipe.startswith("accelerate"):
        return _accelerate_loop
    raise ValueError(f"recipe must be one of {RECIPES}; got recipe={recipe!r}")


def _accelerate_loop(
    job: _Job, start: Checkpoint | None
) -> tuple[list[Record], list[tuple[int, Checkpoint]]]:
    from accelerate.data_loader import prepare_data_loader  # type: ignore[import-untyped]

    workers = _ONE_WORKER if job.recipe == "accelerate-workers" else {}

    def make(sampler: Any) -> Any:
        base = job.loader(sampler, stateful=False, **workers) if job.batched else None
        if base is None:
            import torch.utils.data
            from torchdata.stateful_dataloader.sampler import BatchSampler

            dataset: Any = _SlotDataset(job.case.dataset_size)
            extra: dict[str, Any] = {"num_workers": 1, "prefetch_factor": 1} if workers else {}
            base = torch.utils.data.DataLoader(
                dataset,
                batch_sampler=BatchSampler(sampler, job.case.loader_batch_size, job.drop_last),
                collate_fn=_collate,
                **extra,
            )
        return prepare_data_loader(
            base,
            device=None,
            num_processes=1,
            process_index=0,
            put_on_device=False,
            use_stateful_dataloader=True,
        )

    def batches(loader: Any, sampler: Any) -> Iterator[tuple[Any, Callable[[], Any]]]:
        for batch in loader:
            state = loader.state_dict()
            yield batch, _const(state)

    return _epoch_loop(
        job,
        start,
        make=make,
        save=lambda s, loader: loader.state_dict(),
        load=lambda s, loader, state: loader.load_state_dict(state),
        batches=batches,
    )


def _sampler_epochs(job: _Job) -> list[Record]:
    """What the loop must train: the sampler's epochs through a plain loader, no workers."""
    sampler = job.sampler()
    loader = job.loader(sampler, stateful=False)
    out = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        out += [_record(epoch, b) for b in loader]
    return out


def _check_reference(job: _Job, reference: list[Record], what: str) -> None:
    expected = _sampler_epochs(job)
    if not reference:
        raise ContractViolation(f"{job.case.name}: {what} trained on nothing")
    if reference != expected:
        raise ContractViolation(
            f"{job.case.name}: {what}, uninterrupted, does not train the sampler's epochs: it "
            f"trains {_diff(expected, reference)}"
        )


def _check_resumes(case: SamplerCase, recipe: str, drop_last: bool) -> None:
    job = _Job(case, recipe, drop_last)
    loop = _loop_for(recipe)
    reference, checkpoints = loop(job, None)
    _check_reference(job, reference, f"recipe {recipe!r} (loader drop_last={drop_last})")
    for done, checkpoint in checkpoints:
        resumed, _ = loop(job, checkpoint)
        if reference[done:] != resumed:
            raise ContractViolation(
                f"{case.name}: recipe {recipe!r} (loader drop_last={drop_last}): resuming from "
                f"the checkpoint after {done} of {len(reference)} batches (epoch "
                f"{checkpoint['epoch']}) trains {_diff(reference[done:], resumed)}"
            )


def _diff(expected: list[Record], got: list[Record]) -> str:
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return f"{b} at batch {i} where the uninterrupted run trains {a}"
    return f"{len(got)} batches where the uninterrupted run trains {len(expected)}"


def _check_peek(case: SamplerCase, drop_last: bool) -> None:
    """``next(iter(loader))`` before the loop changes nothing, workers or not.

    The loop calls ``set_epoch`` every epoch; a loop that never does (Megatron's) is checked
    without workers: a worker's prefetch can run a short epoch out, and a pass that reaches an
    epoch's end completes it (NOTE [ The loop contract ]).
    """
    job = _Job(case, "peek", drop_last)

    def run(stateful: bool, workers: int, peek: bool, set_epoch: bool = True) -> list[Record]:
        sampler = job.sampler()
        loader = job.loader(sampler, workers=workers, stateful=stateful)
        if peek:
            next(iter(loader))
        out = []
        for epoch in range(EPOCHS):
            if set_epoch:
                sampler.set_epoch(epoch)
            out += [_record(epoch, b) for b in loader]
        return out

    reference = run(False, 0, peek=False)
    mid = _mid_loop_peeks(job)
    if mid != reference:
        raise ContractViolation(
            f"{case.name}: a peek inside the loop (next(iter(loader)) mid-epoch) changed the "
            f"run: {_diff(reference, mid)}"
        )
    long_epochs = len(reference) >= 2 * EPOCHS
    for stateful in (False, True):
        for workers, set_epoch in ((0, True), (2, True), (4, True), (0, False)):
            if not set_epoch and not long_epochs:
                continue
            got = run(stateful, workers, peek=True, set_epoch=set_epoch)
            if got != reference:
                kind = "StatefulDataLoader" if stateful else "DataLoader"
                raise ContractViolation(
                    f"{case.name}: a peek before the loop ({kind}, num_workers={workers}, "
                    f"set_epoch {'every epoch' if set_epoch else 'never'}) changed the run: "
                    f"{_diff(reference, got)}"
                )


def _mid_loop_peeks(job: _Job) -> list[Record]:
    """The loop with a ``next(iter(loader))`` after each epoch's first batch (a callback logging
    an example batch), over a DataLoader and a StatefulDataLoader: what the loop trains."""
    out: list[Record] = []
    for stateful in (False, True):
        sampler = job.sampler()
        loader = job.loader(sampler, stateful=stateful)
        trained = []
        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)
            for i, batch in enumerate(loader):
                trained.append(_record(epoch, batch))
                if i == 0:
                    next(iter(loader), None)
        if stateful and trained != out:
            return trained
        out = trained
    return out


# -- Lightning --------------------------------------------------------------------------------
def _check_lightning(case: SamplerCase, variant: str, drop_last: bool) -> None:
    import lightning.pytorch as pl
    import torch

    reload = variant == "lightning-reload"
    workers = _ONE_WORKER if variant == "lightning-workers" else {}
    job = _Job(case, variant, drop_last)
    seen: list[Record] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(()))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            seen.append(_record(self.current_epoch, batch))
            return self.weight * 0.0

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(pl.LightningDataModule):
        def train_dataloader(self) -> Any:
            return job.loader(job.sampler(), **workers)

    def fit(root: Path, ckpt: str | None) -> list[Record]:
        seen.clear()
        trainer = pl.Trainer(
            max_epochs=EPOCHS,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            use_distributed_sampler=False,
            reload_dataloaders_every_n_epochs=1 if reload else 0,
            num_sanity_val_steps=0,
            callbacks=[
                pl.callbacks.ModelCheckpoint(
                    dirpath=root, every_n_train_steps=1, save_top_k=-1, filename="{step}"
                )
            ],
            default_root_dir=root,
        )
        trainer.fit(Module(), datamodule=Data(), ckpt_path=ckpt)
        return list(seen)

    what = f"Lightning ({variant}, loader drop_last={drop_last})"
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        root = Path(tmp)
        reference = fit(root / "ref", None)
        _check_reference(job, reference, what)
        # an epoch's last step: with workers, Lightning runs the restored loader (already run
        # out by its workers) as the next epoch; torchdata's own samplers lose that epoch too
        epoch_ends = {
            i + 1 for i in range(len(reference) - 1) if reference[i][0] != reference[i + 1][0]
        }
        for ckpt in sorted((root / "ref").glob("step=*.ckpt"), key=lambda p: int(p.stem[5:])):
            done = int(ckpt.stem[5:])
            if workers and done in epoch_ends:
                continue
            got = fit(root / "resumed", str(ckpt))
            if got != reference[done:]:
                raise ContractViolation(
                    f"{case.name}: {what}: resuming from the checkpoint after step {done} of "
                    f"{len(reference)} trains {_diff(reference[done:], got)}"
                )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    level = logging.getLogger("lightning").level
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.getLogger("lightning").setLevel(level)


def check_loop_recipes(case: SamplerCase, recipes: Sequence[str] | None = None) -> list[str]:
    """Run the loop recipes on ``case`` (rank ``dp_size - 1``); raise on the first divergence.

    Args:
        case: The sampler configuration.
        recipes: Names from :data:`RECIPES`; None means every available one.

    Returns:
        The recipes that ran (those asked for whose framework is installed).

    Raises:
        ContractViolation: If a resumed or peeked run differs from the uninterrupted one.
        ValueError: If a recipe name is unknown.
    """
    asked = available_recipes() if recipes is None else tuple(recipes)
    unknown = [r for r in asked if r not in RECIPES]
    if unknown:
        raise ValueError(f"recipes must be names from {RECIPES}; got unknown {unknown}")
    ran = []
    available = set(available_recipes())
    drops = (False,) if _batched(case) else (False, True)
    for recipe in asked:
        if recipe not in available:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for drop_last in drops:
                if recipe == "peek":
                    _check_peek(case, drop_last)
                elif recipe.startswith("lightning"):
                    _check_lightning(case, recipe, drop_last)
                else:
                    _check_resumes(case, recipe, drop_last)
        ran.append(recipe)
    return ran
