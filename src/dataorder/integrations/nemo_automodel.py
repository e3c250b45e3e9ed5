"""NeMo Automodel (tested: 0.7.0): dataorder samplers in its diffusion and LLM recipes.

**Diffusion recipe.** ``data.dataloader._target_`` names a dataclass with
``build(*, dp_rank, dp_world_size, batch_size)``; NeMo's own YAML keys keep working::

    data:
      dataloader:
        _target_: dataorder.integrations.nemo_automodel.DiffusionBucketLoader
        cache_dir: /data/cache          # NeMo's preprocessed cache, read by NeMo's dataset
        base_resolution: [512, 512]
        num_workers: 4
        seed: 1234                      # dataorder's: NeMo's sampler always uses 42
        distributed_checkpointing: true # elastic: the loader state goes through DCP

NeMo tracks the recipe's ``dataloader`` and ``sampler`` attributes and checkpoints both
(``recipes/base_recipe.py``): a ``StatefulDataLoader`` per data-parallel rank
(``dataloader/dataloader_dp_rank_{r}.pt``), anything else with ``state_dict`` on rank 0 only
(``sampler.pt``), loaded on every rank; the restore runs in sorted key order, so the loader's
state, then the sampler's, then the recipe's ``set_epoch``. Both states here are the state
training consumed (NOTE [ The consumed state ]), identical on every rank, so applying the two
in a row is exact with workers, and with another number of workers than the save: the loader's
file is torchdata's own state, which records its number of workers (torchdata asserts it at the
next ``iter()``), and the sampler's load drops it (:func:`~dataorder.integrations.common.restore`)
and places the order. A job that shrinks its data-parallel size loads the surviving
ranks' files, which is exact (the state is global); one that grows finds no file for its new
ranks and NeMo raises ``FileNotFoundError``, unless ``distributed_checkpointing: true``: the
loader then goes to the recipe as a :class:`DistributedLoader`, which NeMo saves and loads through
DCP (its ``use_distributed_checkpointing`` path), one global state for any size.

**LLM recipe.** Its YAML has no sampler key, and ``dataloader._target_`` may only be torch's
or torchdata's loader. :func:`install_batch_sampler` replaces the typed config's
``batch_sampler_config`` before ``setup()``; :data:`DataorderLLMRecipe` (built on first use) is
NeMo's ``TrainFinetuneRecipeForNextTokenPrediction`` doing that. The recipe's loader is a
``StatefulDataLoader`` saved per data-parallel rank: shrinking is exact, growing raises in NeMo.
The recipe calls ``set_epoch`` on ``dataloader.sampler``, which a batch sampler never is:
dataorder's Megatron samplers start the next epoch on the next pass by themselves.

NeMo is imported when something here is used, never on import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Literal

from dataorder.integrations.common import consumed_state, import_peer, lazy_classes, restore
from dataorder.integrations.dcp import OrderState
from dataorder.llm.factory import create_megatron_sampler

# DataorderLLMRecipe is made on first use (module __getattr__), so it is not in __all__
__all__ = [
    "DiffusionBucketLoader",
    "DiffusionLoaderBuild",
    "DistributedLoader",
    "LoaderSampler",
    "MegatronBatchSampler",
    "install_batch_sampler",
]

INSTALL = "pip install --no-deps nemo-automodel==0.7.0 (and transformers)"
_WHO = "dataorder.integrations.nemo_automodel"


def _nemo(module: str) -> Any:
    return import_peer(module, INSTALL, needed_by=_WHO)


class LoaderSampler:
    """The sampler as NeMo's diffusion recipe holds it (``self.sampler``).

    ``set_epoch``, ``len()`` and every other attribute are the sampler's. Its state is the
    loader's consumed state, not the sampler's own, which with workers is ahead of training:
    NeMo writes this one as rank 0's ``sampler.pt`` and applies it on every rank after the
    loader's state, so both must agree.
    """

    def __init__(self, sampler: Any, loader: Any) -> None:
        self.inner = sampler
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        """The sampler's ``set_epoch`` (the recipe calls it at every epoch)."""
        self.inner.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "loader"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def state_dict(self) -> dict[str, Any]:
        """The consumed state (the same on every rank)."""
        return consumed_state(self.loader)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Place the sampler at ``state_dict`` (absolute: a second load wins, over the loader's
        state too: :func:`~dataorder.integrations.common.restore`)."""
        restore(self.loader, state_dict)


class DistributedLoader(OrderState):
    """A loader NeMo checkpoints through DCP: one global state, loadable at any DP size.

    NeMo saves an object with ``use_distributed_checkpointing = True`` and
    ``state_dict``/``load_state_dict`` with ``dcp.save``/``dcp.load`` on every rank
    (``Checkpointer.save_distributed_state``); a ``StatefulDataLoader`` would go to per-rank
    files instead, so this wrapper is deliberately not one. Iteration, ``len()`` and every other
    attribute are the wrapped loader's.
    """

    use_distributed_checkpointing = True

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "target", "sampler"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.loader, name)


@dataclasses.dataclass
class DiffusionLoaderBuild:
    """What the diffusion recipe reads from ``build()`` (NeMo's ``DiffusionDataloaderBuild``)."""

    dataloader: Any
    sampler: Any
    drop_last: bool = False


@dataclasses.dataclass
class DiffusionBucketLoader:
    """NeMo's text-to-image loader config with dataorder's bucket sampler.

    The fields up to ``prefetch_factor`` are NeMo's ``TextToImageDataloaderConfig``'s, with its
    defaults, so a YAML written for NeMo only changes ``_target_``. ``shuffle`` shuffles both the
    bucket order and each bucket, as NeMo's does.

    Args:
        seed: The order's seed (NeMo's sampler has none and uses 42).
        bucket_order: ``"sequential"`` (NeMo's) or ``"interleaved"`` (every stretch of
            training sees every shape; see ``SequentialBucketSampler``).
        distributed_checkpointing: Hand the recipe a :class:`DistributedLoader`, which NeMo
            checkpoints through DCP: resumes on a larger data-parallel size too.

    Subclasses may override :meth:`make_dataset` and :meth:`make_collate_fn` (a video
    dataset, another cache format); the sampler reads any dataset with NeMo's
    ``sorted_bucket_keys`` and ``bucket_groups``.
    """

    cache_dir: str
    train_text_encoder: bool = False
    base_resolution: tuple[int, int] = (256, 256)
    drop_last: bool = True
    shuffle: bool = True
    dynamic_batch_size: bool = False
    num_workers: int = 4
    pin_memory: bool = True
    prefetch_factor: int = 2
    seed: int = 42
    bucket_order: str = "sequential"
    distributed_checkpointing: bool = False

    def make_dataset(self) -> Any:
        """NeMo's ``TextToImageDataset`` over ``cache_dir``."""
        module = _nemo("nemo_automodel.components.datasets.diffusion.text_to_image_dataset")
        return module.TextToImageDataset(
            cache_dir=self.cache_dir, train_text_encoder=self.train_text_encoder
        )

    def make_collate_fn(self) -> Any:
        """NeMo's ``collate_fn_text_to_image``."""
        module = _nemo("nemo_automodel.components.datasets.diffusion.collate_fns")
        return module.collate_fn_text_to_image

    def build(self, *, dp_rank: int, dp_world_size: int, batch_size: int) -> DiffusionLoaderBuild:
        """The loader and sampler of one data-parallel rank (the recipe's call).

        Raises:
            ImportError: If NeMo Automodel (for the default dataset) or torchdata is missing.
            ValueError: As ``SequentialBucketSampler`` for a bad field, naming it.
        """
        from dataorder.diffusion.sampler.sampler import SequentialBucketSampler  # imports torch

        sdl = import_peer(
            "torchdata.stateful_dataloader", "pip install torchdata", needed_by=_WHO
        ).StatefulDataLoader
        dataset = self.make_dataset()
        sampler = SequentialBucketSampler(
            dataset,
            base_batch_size=batch_size,
            base_resolution=tuple(self.base_resolution),  # type: ignore[arg-type]
            drop_last=self.drop_last,
            shuffle_buckets=self.shuffle,
            shuffle_within_bucket=self.shuffle,
            dynamic_batch_size=self.dynamic_batch_size,
            seed=self.seed,
            num_replicas=dp_world_size,
            rank=dp_rank,
            bucket_order=self.bucket_order,
        )
        workers = self.num_workers
        loader = sdl(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.make_collate_fn(),
            num_workers=workers,
            pin_memory=self.pin_memory,
            prefetch_factor=self.prefetch_factor if workers > 0 else None,
            persistent_workers=workers > 0,
        )
        out = DistributedLoader(loader) if self.distributed_checkpointing else loader
        return DiffusionLoaderBuild(
            dataloader=out, sampler=LoaderSampler(sampler, loader), drop_last=self.drop_last
        )


@dataclasses.dataclass(frozen=True)
class MegatronBatchSampler:
    """NeMo's ``BatchSamplerConfig`` for the LLM recipe: dataorder's Megatron samplers.

    The fields are NeMo's ``MegatronSamplerConfig``'s plus ``seed`` (NeMo's cyclic sampler
    seeds with ``seed + epoch``; dataorder's keys never collide across epochs).
    """

    micro_batch_size: int
    global_batch_size: int
    dataloader_type: Literal["single", "cyclic"] = "single"
    drop_last: bool = True
    pad_samples_to_global_batch_size: bool = False
    seed: int = 0

    def build(self, *, dataset_len: int, rank: int, world_size: int) -> Any:
        """The batch sampler of one data-parallel rank (NeMo's ``DataloaderConfig.build`` call)."""
        return create_megatron_sampler(
            dataset_len,
            self.micro_batch_size,
            self.global_batch_size,
            self.dataloader_type,
            drop_last=self.drop_last,
            pad_samples_to_global_batch_size=self.pad_samples_to_global_batch_size,
            rank=rank,
            world_size=world_size,
            seed=self.seed,
        )


def install_batch_sampler(recipe: Any, config: MegatronBatchSampler | None = None) -> Any:
    """Make a NeMo LLM recipe build its loader with a dataorder batch sampler.

    Call it before ``recipe.setup()``. ``recipe.cfg.dataloader`` (NeMo's typed
    ``DataloaderConfig``, a cached property of its ``RecipeConfig``) is replaced by a copy whose
    ``batch_sampler_config`` is ``config``; without ``config``, NeMo's own Megatron sampler
    config is translated field for field, with the loader's ``seed``.

    Returns:
        The new ``DataloaderConfig``.

    Raises:
        ValueError: If the recipe's loader has no batch sampler to replace and ``config`` is
            None (dataorder's Megatron samplers need NeMo's Megatron dataset schedule then).
    """
    cfg = recipe.cfg
    current = cfg.dataloader
    if config is None:
        nemo = current.batch_sampler_config
        if nemo is None:
            raise ValueError(
                "config must be given when the recipe's dataloader has no batch sampler "
                f"(not a Megatron dataset); got config={config!r}"
            )
        config = MegatronBatchSampler(
            micro_batch_size=nemo.micro_batch_size,
            global_batch_size=nemo.global_batch_size,
            dataloader_type=nemo.dataloader_type,
            drop_last=nemo.drop_last,
            pad_samples_to_global_batch_size=nemo.pad_samples_to_global_batch_size,
            seed=current.seed,
        )
    new = dataclasses.replace(current, batch_sampler_config=config)
    # RecipeConfig.dataloader is a functools.cached_property: the instance entry wins
    cfg.__dict__["dataloader"] = new
    return new


def _llm_recipe_class() -> type:
    base = _nemo("nemo_automodel.recipes.llm.train_ft").TrainFinetuneRecipeForNextTokenPrediction

    class DataorderLLMRecipeImpl(base):  # type: ignore[misc, valid-type]
        """NeMo's LLM train/finetune recipe, reading through a dataorder Megatron sampler."""

        def setup(self, *args: Any, **kwargs: Any) -> Any:
            install_batch_sampler(self)
            return super().setup(*args, **kwargs)

    DataorderLLMRecipeImpl.__name__ = DataorderLLMRecipeImpl.__qualname__ = "DataorderLLMRecipe"
    return DataorderLLMRecipeImpl


# DataorderLLMRecipe subclasses a NeMo class: this module imports without NeMo
__getattr__ = lazy_classes(__name__, {"DataorderLLMRecipe": _llm_recipe_class})
