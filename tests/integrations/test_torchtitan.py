"""torchtitan 0.3.0 in its own checkpoint composition: examples/torchtitan.py under torchrun.

The loader is built through its ``Configurable`` config as torchtitan's trainer builds it,
iterated once as ``Trainer.batch_generator`` does (no ``set_epoch``: it crosses the epoch
itself), and saved with ``dcp.save`` of the states ``CheckpointManager`` composes
(``train_state``, ``dataloader``, the model's flattened parameters). Saved on 2 ranks after 3
steps, it resumes on 3 and on 1 rank, with 0 and 2 loader workers, and with the other number of
workers than each checkpoint was saved with: every sample of epochs 0 and 1 exactly once over
both runs. torchtitan's own ``ParallelAwareDataloader`` is refused at both
sizes (per-rank keys), which is why this loader exists. Skipped without torchtitan (installed
with ``pip install --no-deps torchtitan==0.3.0`` plus tyro, docstring-parser, typeguard).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.test_examples import torchrun

# one worker runs this module (tests/conftest.py: NOTE [ xdist ]): its tests share a
# module-scoped run that each worker would otherwise start again
pytestmark = pytest.mark.xdist_group("torchtitan")


@pytest.fixture(scope="module", autouse=True)
def _needs_torchtitan() -> None:
    """Skip without torchtitan: imported when the module's tests run, not at collection
    (about 2 s of CPU that every xdist worker would pay, for the one that runs them)."""
    pytest.importorskip("torchtitan.components.dataloader")


N = 48


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("titan")
    out = torchrun("torchtitan.py", 2, "--ckpt", "c", "--save", cwd=root).stdout
    assert "workers=2: saved step 3 on 2 ranks" in out
    return root


def _check_resumed(root: Path, world: int, *extra: str) -> None:
    out = torchrun("torchtitan.py", world, "--ckpt", "c", *extra, cwd=root).stdout
    swap = "--swap-workers" in extra
    for workers in (0, 2):
        saved_with = 2 - workers if swap else workers
        assert (
            f"workers={workers}: resumed at step 3 on {world} ranks, trained on to step "
            f"{3 + (2 * N - 12) // (2 * world)}, the end of epoch 1 (saved with {saved_with} "
            "workers)"
        ) in out
        assert f"workers={workers}: torchtitan's own loader on {world} ranks: refused" in out
        seen: dict[int, Counter[int]] = {}
        runs = (f"a.w{saved_with}", f"b{world}{'x' if swap else ''}.w{workers}")
        for run in runs:
            for rank_records in json.loads((root / f"{run}.json").read_text()):
                for epoch, ids in rank_records:
                    seen.setdefault(epoch, Counter()).update(ids)
        assert seen == {0: Counter(range(N)), 1: Counter(range(N))}, (world, workers)
        for epoch in (0, 1):
            assert f"workers={workers}: epoch {epoch}: every sample once ✓ (48 of 48)" in out


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_saved_on_2_ranks_resumes_on_3_with_the_other_number_of_workers(saved: Path) -> None:
    """Saved with 0 and 2 loader workers, each resumed with the other count, on 3 ranks."""
    _check_resumed(saved, 3, "--swap-workers")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_saved_on_2_ranks_resumes_on_3_with_0_and_2_workers(saved: Path) -> None:
    _check_resumed(saved, 3)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_saved_on_2_ranks_resumes_on_1_with_0_and_2_workers(saved: Path) -> None:
    _check_resumed(saved, 1)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_saved_on_2_ranks_resumes_on_1_with_the_other_number_of_workers(saved: Path) -> None:
    _check_resumed(saved, 1, "--swap-workers")


def samples(*, path: str | None, seq_len: int | None, tokenizer: object) -> list[int]:
    return list(range(N))


def test_the_loader_config_is_torchtitans() -> None:
    from torchtitan.components.dataloader import ParallelAwareDataloader

    from dataorder.integrations.torchtitan import STATE_KEY, DataorderLoader

    config = DataorderLoader.Config(dataset_fn="builtins:range", seed=3)
    assert isinstance(config, ParallelAwareDataloader.Config)
    with pytest.raises(ValueError, match=r"dataset_fn must be a 'package\.module:function' path"):
        DataorderLoader.Config(dataset_fn="range").build(
            dp_world_size=2, dp_rank=0, local_batch_size=2
        )
    loader = DataorderLoader.Config(
        dataset_fn="tests.integrations.test_torchtitan:samples", seed=3
    ).build(dp_world_size=2, dp_rank=1, local_batch_size=2)
    assert isinstance(loader, ParallelAwareDataloader)
    state = loader.state_dict()
    assert list(state) == [STATE_KEY]
    with pytest.raises(ValueError, match=r"a per-rank ParallelAwareDataloader state cannot"):
        loader.load_state_dict({"dp_rank_1": b"", "world_size": 2})
    loader.load_state_dict({})  # torchtitan's "nothing to load": left as it is
