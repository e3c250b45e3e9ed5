"""What every stack integration relies on, for every sampler family.

The families are those of tests/helpers/stack_samplers.py.

* The state inside a torchdata ``StatefulDataLoader`` state is the state training consumed,
  with and without workers; a state taken between worker snapshots is refused, or counted
  forward when the sampler is given.
* ``restore`` drops the iterator a loader's ``state_dict()`` started (DCP's template call), so
  the next pass starts at the loaded position with workers too.
* ``load_state_dict`` is absolute: the same state twice, or two states in a row (NeMo applies
  the loader's and then rank 0's), leave the last one.
* The state is identical on every rank of a real gloo job, and a per-rank state is refused
  there on every rank (tests/integrations/stack_ranks.py under torchrun).
* Each integration module imports without its stack and, used, names the pip line.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler

from dataorder.integrations.common import (
    consumed_state,
    find_sampler,
    is_batch_sampler,
    sampler_state_from_loader_state,
)
from dataorder.integrations.dcp import OrderState
from tests.helpers.stack_samplers import FAMILIES, Items, collate_list
from tests.test_examples import torchrun

LOADER_BATCH = 4  # a per-index sampler's loader batch


def loader(sampler: Any, workers: int = 0, **options: Any) -> StatefulDataLoader:
    if is_batch_sampler(sampler):
        return StatefulDataLoader(
            Items(), batch_sampler=sampler, num_workers=workers, collate_fn=collate_list, **options
        )
    return StatefulDataLoader(
        Items(),
        batch_sampler=BatchSampler(sampler, LOADER_BATCH, False),
        num_workers=workers,
        collate_fn=collate_list,
        **options,
    )


def reference_state(name: str, steps: int) -> dict[str, Any]:
    """The state after ``steps`` batches of a loader without workers (nothing runs ahead)."""
    sampler = FAMILIES[name](1, 2)
    batches = iter(loader(sampler))
    for _ in range(steps):
        next(batches)
    return sampler.state_dict()


FAMILY_NAMES = sorted(FAMILIES)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_the_consumed_state_without_workers_is_the_samplers(name: str) -> None:
    sampler = FAMILIES[name](1, 2)
    dl = loader(sampler)
    batches = iter(dl)
    next(batches), next(batches)
    assert find_sampler(dl) is sampler
    assert consumed_state(dl) == sampler.state_dict() == reference_state(name, 2)
    assert OrderState(dl).state_dict() == {"sampler": reference_state(name, 2)}


@pytest.mark.parametrize("name", ["megatron-random", "distributed", "packed"])
def test_the_consumed_state_with_workers_is_not_the_read_ahead(name: str) -> None:
    sampler = FAMILIES[name](1, 2)
    dl = loader(sampler, workers=2)
    batches = iter(dl)
    next(batches), next(batches)
    assert consumed_state(dl) == reference_state(name, 2)
    assert sampler.state_dict() != reference_state(name, 2)  # the workers ran it ahead


@pytest.mark.parametrize("name", ["megatron-random", "distributed"])
def test_steps_since_a_snapshot_are_refused_or_counted(name: str) -> None:
    sampler = FAMILIES[name](1, 2)
    dl = loader(sampler, workers=1, snapshot_every_n_steps=2)
    batches = iter(dl)
    for _ in range(3):  # a snapshot at step 2, one step after it
        next(batches)
    state = dl.state_dict()
    assert state["_steps_since_snapshot"] == 1
    with pytest.raises(ValueError, match="1 batches after its last worker snapshot"):
        sampler_state_from_loader_state(state)
    counted = sampler_state_from_loader_state(state, sampler=sampler, batch_size=LOADER_BATCH)
    assert counted == reference_state(name, 3)
    assert consumed_state(dl) == reference_state(name, 3)  # the loader's own batch size


def test_a_loader_state_without_a_dataorder_sampler_is_refused() -> None:
    with pytest.raises(ValueError, match="one dataorder sampler state; found it at nowhere"):
        sampler_state_from_loader_state({"_index_sampler_state": {"yielded": 3}})
    with pytest.raises(TypeError, match="loader_state must be a StatefulDataLoader state dict"):
        sampler_state_from_loader_state([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="loader_or_sampler must be a dataorder sampler"):
        find_sampler(StatefulDataLoader(list(range(8)), batch_size=2))


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_load_state_dict_is_absolute_two_states_in_a_row_leave_the_last(name: str) -> None:
    early, late = reference_state(name, 1), reference_state(name, 3)
    expected = FAMILIES[name](1, 2)
    expected.load_state_dict(late)
    want = list(expected)
    for first in (early, late):  # NeMo: the loader's state, then rank 0's sampler.pt
        sampler = FAMILIES[name](1, 2)
        before = copy.deepcopy(first)
        sampler.load_state_dict(first)
        sampler.load_state_dict(late)
        assert first == before  # not mutated
        assert sampler.state_dict() == late
        assert list(sampler) == want


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", ["megatron-random", "bucket", "packed", "distributed"])
def test_restore_drops_the_iterator_a_template_state_dict_started(name: str, workers: int) -> None:
    """DCP calls ``state_dict()`` while loading: a fresh loader starts an iterator (with workers,
    prefetching from the old position). After ``restore`` the next pass starts at the state."""
    saved = reference_state(name, 2)
    expected = FAMILIES[name](1, 2)
    expected.load_state_dict(saved)
    want = [list(b) for b in loader(expected)]
    sampler = FAMILIES[name](1, 2)
    dl = loader(sampler, workers=workers)
    OrderState(dl).state_dict()  # the template call
    OrderState(dl).load_state_dict({"sampler": saved})
    assert [list(b) for b in dl] == want


def test_order_state_refuses_a_foreign_state() -> None:
    state = OrderState(FAMILIES["megatron-random"](0, 2))
    with pytest.raises(TypeError, match=r"state_dict must be a dict with the keys \['sampler'\]"):
        state.load_state_dict({"dp_rank_0": b"..."})
    with pytest.raises(ValueError, match="seed is 4 in the state but 3 in this sampler"):
        state.load_state_dict(
            {"sampler": FAMILIES["megatron-random"](0, 2).state_dict() | {"config.seed": 4}}
        )


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_the_state_is_identical_on_every_rank_of_a_real_job(tmp_path: Any) -> None:
    proc = torchrun("../tests/integrations/stack_ranks.py", 3, cwd=tmp_path)
    for name in FAMILIES:
        assert f"{name}: state identical on 3 ranks" in proc.stdout
    assert "a per-rank state is refused on every rank" in proc.stdout


BLOCK_STACKS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("transformers", "torchtitan", "nemo_automodel", "megatron"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
sys.meta_path.insert(0, Block())
import importlib
for m in ("common", "dcp", "nemo_automodel", "megatron_lm", "hf_trainer", "torchtitan"):
    importlib.import_module("dataorder.integrations." + m)
from dataorder.integrations import hf_trainer, megatron_lm, nemo_automodel, torchtitan
for use in (lambda: hf_trainer.DataorderTrainer, lambda: torchtitan.DataorderLoader,
            lambda: nemo_automodel.DataorderLLMRecipe,
            lambda: nemo_automodel.DiffusionBucketLoader("c").build(
                dp_rank=0, dp_world_size=1, batch_size=2),
            lambda: megatron_lm.external_provider(lambda n: (None, None, None))(None)):
    try:
        use()
    except ImportError as err:
        print(err)
"""


def test_each_module_imports_without_its_stack_and_names_the_pip_line() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCK_STACKS], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 5, out.stdout
    assert "dataorder.integrations.hf_trainer needs transformers" in lines[0]
    assert "install it with: pip install transformers" in lines[0]
    assert "needs torchtitan.components.dataloader" in lines[1]
    assert "pip install --no-deps torchtitan==0.3.0" in lines[1]
    assert "pip install --no-deps nemo-automodel==0.7.0" in lines[2]
    assert "pip install --no-deps nemo-automodel==0.7.0" in lines[3]
    assert "needs megatron.training" in lines[4]
