"""torchtitan (tested: 0.3.0 from PyPI): a data loader whose state resumes on another DP size.

torchtitan 0.3.0 builds its loader from ``trainer_config.dataloader`` (a ``Configurable``
config) with ``build(dp_world_size=, dp_rank=, tokenizer=, seq_len=, local_batch_size=,
snapshot_every_n_steps=)``, and its ``CheckpointManager`` saves it as ``states["dataloader"]``
through DCP. The stock ``ParallelAwareDataloader`` saves its torchdata state under a per-rank
key ``dp_rank_{r}`` and refuses any change of data-parallel size. :data:`DataorderLoader`
(a ``ParallelAwareDataloader``) saves the dataorder state instead, the same on every rank, so DCP
keeps one copy that loads at any size. In a config registry module (``--module pkg --config
fn``)::

    from dataorder.integrations.torchtitan import DataorderLoader

    def llama3_dataorder():
        config = llama3_debugmodel()
        config.dataloader = DataorderLoader.Config(
            dataset_fn="my_pkg.data:tokenised_dataset",  # f(path=, seq_len=, tokenizer=)
            dataset_path="/data/tokens", seed=1234, num_workers=2)
        return config

The dataset is map-style; ``dataset[i]`` (``i`` whatever the sampler's batches hold) returns
what the collate function turns into torchtitan's ``(input_dict, labels)``. torchtitan calls
``iter()`` once and ends training when it raises ``StopIteration``, and never calls
``set_epoch``: this loader starts the next epoch itself. ``load_state_dict`` drops the iterator
that DCP's ``state_dict()`` call started while loading (with workers, it prefetches from the old
position). torchtitan passes ``snapshot_every_n_steps`` equal to its checkpoint interval (times
gradient accumulation), so the state is always on a worker snapshot.

torchtitan main (after 0.3.0) replaced this loader with a Grain pipeline whose state is per
rank; it refuses a DP change by design, and this module does not target it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dataorder._validate import fail
from dataorder.integrations.common import (
    import_peer,
    lazy_classes,
    sampler_state_from_loader_state,
)
from dataorder.llm.megatron import MegatronPretrainingRandomSampler

# DataorderLoader is made on first use (module __getattr__), so it is not in __all__
__all__ = ["STATE_KEY", "resolve"]

INSTALL = "pip install --no-deps torchtitan==0.3.0 && pip install tyro docstring-parser typeguard"
_WHO = "dataorder.integrations.torchtitan"

#: The loader's one state key (the same on every rank, so DCP keeps one copy).
STATE_KEY = "dataorder"


def resolve(path: str, name: str) -> Callable[..., Any]:
    """The function a ``"package.module:function"`` string names.

    Raises:
        ValueError: If ``path`` is not of that form (naming ``name``).
        ImportError, AttributeError: If the module or function does not exist.
    """
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        fail(name, "a 'package.module:function' path", path)
    module, func = path.split(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), func)
    return found


def _default_sampler(
    dataset: Any, *, dp_rank: int, dp_world_size: int, local_batch_size: int, seed: int
) -> Any:
    return MegatronPretrainingRandomSampler(
        len(dataset), local_batch_size, dp_rank, dp_world_size, seed=seed
    )


def _loader_class() -> type:
    titan = import_peer("torchtitan.components.dataloader", INSTALL, needed_by=_WHO)
    sdl = import_peer(
        "torchdata.stateful_dataloader", "pip install torchdata", needed_by=_WHO
    ).StatefulDataLoader

    class DataorderLoaderImpl(titan.ParallelAwareDataloader):  # type: ignore[misc, name-defined]
        """torchtitan's loader reading a dataorder batch sampler; global, elastic state."""

        @dataclass(kw_only=True, slots=True)
        class Config(titan.ParallelAwareDataloader.Config):  # type: ignore[misc, name-defined]
            dataset_fn: str = ""
            """``package.module:function`` building the map-style dataset, called as
            ``f(path=dataset_path, seq_len=seq_len, tokenizer=tokenizer)``."""

            sampler_fn: str = ""
            """Optional ``package.module:function`` building the dataorder batch sampler,
            called as ``f(dataset, dp_rank=, dp_world_size=, local_batch_size=, seed=)``;
            default: ``MegatronPretrainingRandomSampler``."""

            collate_fn: str = ""
            """Optional ``package.module:function``: the loader's ``collate_fn``."""

            seed: int = 0
            """The order's seed."""

        def __init__(
            self,
            config: Any,
            *,
            dp_world_size: int,
            dp_rank: int,
            tokenizer: Any = None,
            seq_len: int | None = None,
            local_batch_size: int,
            snapshot_every_n_steps: int | None = 1,
            **_: Any,
        ) -> None:
            dataset = resolve(config.dataset_fn, "dataset_fn")(
                path=config.dataset_path, seq_len=seq_len, tokenizer=tokenizer
            )
            make_sampler = (
                resolve(config.sampler_fn, "sampler_fn") if config.sampler_fn else _default_sampler
            )
            self.order = make_sampler(
                dataset,
                dp_rank=dp_rank,
                dp_world_size=dp_world_size,
                local_batch_size=local_batch_size,
                seed=config.seed,
            )
            kwargs: dict[str, Any] = {
                "batch_sampler": self.order,
                "num_workers": config.num_workers,
                "persistent_workers": config.persistent_workers,
                "pin_memory": config.pin_memory,
                "prefetch_factor": config.prefetch_factor,
                "snapshot_every_n_steps": snapshot_every_n_steps,
            }
            if config.collate_fn:
                kwargs["collate_fn"] = resolve(config.collate_fn, "collate_fn")
            super().__init__(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, **kwargs)

        def __iter__(self) -> Iterator[Any]:
            # torchtitan iterates once and never calls set_epoch: cross epochs here; an epoch
            # with no batch at all ends the stream instead of spinning
            while True:
                produced = False
                for batch in sdl.__iter__(self):
                    produced = True
                    yield batch
                if not produced and len(self.order) == 0:
                    return
                self.order.set_epoch(self.order.epoch + 1)

        def state_dict(self) -> dict[str, Any]:
            """``{"dataorder": state}``: the consumed state, the same on every rank."""
            return {STATE_KEY: consumed_state_of_loader(self)}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            """Place the sampler at the saved state and drop any running iterator.

            An empty state (no loader in the checkpoint, torchtitan's ``exclude_from_loading``)
            leaves the loader as it is. A state written by torchtitan's own loader (per-rank
            keys) is refused: it cannot say where a global order stands.
            """
            if not state_dict:
                return
            if STATE_KEY not in state_dict:
                fail(
                    "state_dict",
                    f"a dataorder loader state (key {STATE_KEY!r}); a per-rank "
                    "ParallelAwareDataloader state cannot be resumed here",
                    sorted(state_dict),
                )
            restore_loader(self, state_dict[STATE_KEY])

    def consumed_state_of_loader(loader: Any) -> dict[str, Any]:
        # the StatefulDataLoader's own state_dict: ParallelAwareDataloader's wraps it per rank
        return sampler_state_from_loader_state(sdl.state_dict(loader), sampler=loader.order)

    def restore_loader(loader: Any, state: dict[str, Any]) -> None:
        sdl.load_state_dict(loader, {})  # drop the iterator DCP's template call started
        loader.order.load_state_dict(dict(state))

    DataorderLoaderImpl.__name__ = DataorderLoaderImpl.__qualname__ = "DataorderLoader"
    return DataorderLoaderImpl


# DataorderLoader subclasses torchtitan's loader: this module imports without torchtitan
__getattr__ = lazy_classes(__name__, {"DataorderLoader": _loader_class})
