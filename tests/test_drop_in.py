"""Drop-in for real: the originals' attributes, subclass hooks, error words and states.

A job must be able to move over between two checkpoints: a NeMo bucket-sampler state and a
torchdata ``StatefulDistributedSampler`` state load in the compat mode that reproduces their order
and continue exactly where the original would have; our states in those modes carry the
original's key, so the original can load them too. The oracle parts compare with the real
classes when they are installed (NeMo Automodel 0.7.0 by path; torchdata) and skip otherwise.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder import (
    BaseMultiresolutionDataset,
    DistributedSampler,
    MultiTierBucketCalculator,
    SequentialBucketSampler,
)
from dataorder.parallel.compat_torch import TORCH_MODE
from dataorder.testing import run_epoch
from tests.diffusion.sampler.test_dataset import (
    item,
    nemo_dataset,
    nemo_diffusion_module,
    write_cache,
)


# -- 1. the calculator's NeMo attributes ----------------------------------------------------------
def test_calculator_has_nemos_attributes() -> None:
    calc = MultiTierBucketCalculator.from_preset("512p", compat="nemo", debug_mode=False)
    assert calc.buckets == calc.get_all_buckets()
    assert [b["id"] for b in calc.buckets] == list(range(len(calc)))
    by_res = calc.buckets_by_resolution
    assert set(by_res) == {b["resolution"] for b in calc.buckets}
    assert all(by_res[b["resolution"]] == b for b in calc.buckets)
    assert calc.debug_mode is False
    with pytest.raises(ValueError, match=r"^Unknown preset 'invalid'\. Available: \['256p'"):
        MultiTierBucketCalculator.from_preset("invalid")
    with pytest.raises(ValueError, match=r"preset must be one of '256p'.*got preset=7\)$"):
        MultiTierBucketCalculator.from_preset(7)  # type: ignore[arg-type]


# -- 2. NeMo's subclass protocol ------------------------------------------------------------------
class CompoundDataset(BaseMultiresolutionDataset):
    """Like NeMo's ImageEditDataset: its own metadata, its own compound keys, its own order."""

    def _load_metadata(self) -> list[dict[str, Any]]:
        return [{"target": (64, 32), "ctx": i % 2} for i in range(7)]

    def _group_by_bucket(self) -> None:
        self.bucket_groups = {}
        for index, it in enumerate(self.metadata or []):
            key = (it["target"], it["ctx"])
            w, h = it["target"]
            group = self.bucket_groups.setdefault(
                key,
                {
                    "indices": [],
                    "aspect_name": self._aspect_ratio_to_name(w / h),
                    "aspect_ratio": w / h,
                    "resolution": (w, h),
                    "pixels": w * h + it["ctx"],
                },
            )
            group["indices"].append(index)
        self.sorted_bucket_keys = sorted(self.bucket_groups, key=lambda k: -k[1])


def test_subclass_hooks_are_called_and_their_order_is_the_samplers(tmp_path: Path) -> None:
    ds = CompoundDataset(tmp_path)  # the cache is the subclass's own: nothing read from disk
    assert ds.cache_dir == tmp_path
    assert ds.sorted_bucket_keys == [((64, 32), 1), ((64, 32), 0)]
    assert ds.bucket_table.bucket_indices(0).tolist() == [1, 3, 5]
    assert ds._aspect_ratio_to_name(2.0) == "wide"
    s = SequentialBucketSampler(
        ds, base_batch_size=3, shuffle_buckets=False, shuffle_within_bucket=False,
        num_replicas=1, rank=0, drop_last=False,
    )  # fmt: skip
    assert run_epoch(s) == [[1, 3, 5], [0, 2, 4], [6]]
    ds.sorted_bucket_keys = [((64, 32), 0), ((64, 32), 1)]  # assignable, as in NeMo
    assert ds.bucket_table.bucket_indices(0).tolist() == [0, 2, 4, 6]


def test_default_grouping_hook_is_nemos(tmp_path: Path) -> None:
    cache = write_cache(tmp_path, [[item(64, 64), item(128, 64, 2.0), item(64, 64)]])
    ds = BaseMultiresolutionDataset(cache)
    keys, groups = ds.sorted_bucket_keys, ds.bucket_groups
    ds._group_by_bucket()  # what a subclass's super()._group_by_bucket() gets
    assert ds.sorted_bucket_keys == keys
    assert ds.bucket_groups == groups


# -- 3. the originals' error words ----------------------------------------------------------------
def test_error_messages_keep_the_originals_words(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"Invalid rank 3, rank should be in the interval \[0, 2\]"
    ):
        DistributedSampler(range(9), num_replicas=3, rank=3)
    with pytest.raises(FileNotFoundError, match=r"No metadata\.json found in"):
        BaseMultiresolutionDataset(tmp_path)
    (tmp_path / "metadata.json").write_text(json.dumps({"files": []}))
    with pytest.raises(
        ValueError, match=r"Invalid metadata format in .*Expected dict with 'shards'"
    ):
        BaseMultiresolutionDataset(tmp_path)
    (tmp_path / "metadata.json").write_text('{"shards": ["a.json"],\n "x": }')
    with pytest.raises(ValueError, match=r"metadata\.json:2: metadata\.json is not valid JSON"):
        BaseMultiresolutionDataset(tmp_path)
    (tmp_path / "metadata.json").write_text(json.dumps({"shards": ["a.json"]}))
    with pytest.raises(FileNotFoundError, match=r"shard 'a\.json' does not exist"):
        BaseMultiresolutionDataset(tmp_path)
    (tmp_path / "a.json").write_text("[{}, 3]")
    with pytest.raises(ValueError, match=r"a\.json: item 1 must be a JSON object; got int"):
        BaseMultiresolutionDataset(tmp_path)


# -- 4a. torchdata StatefulDistributedSampler states ----------------------------------------------
def test_torchdata_state_loads_in_compat_torch() -> None:
    s = DistributedSampler(range(40), num_replicas=2, rank=1, seed=5, compat="torch")
    assert (s.yielded, s.next_yielded) == (0, None)
    assert TORCH_MODE.foreign[0].keys == {"yielded"}  # torchdata's key, loaded in this mode
    full = list(DistributedSampler(range(40), num_replicas=2, rank=1, seed=5, compat="torch"))
    s.load_state_dict({"yielded": 7})
    assert s.next_yielded == 7
    assert list(s) == full[7:]
    assert (s.yielded, s.next_yielded) == (20, None)
    s.yielded = 3  # torchdata code sets the attribute; here it places the cursor
    assert s.state_dict()["yielded"] == 3
    assert list(s) == full[3:]
    with pytest.raises(ValueError, match="Cannot load state_dict with negative yielded value -1"):
        s.load_state_dict({"yielded": -1})
    with pytest.raises(ValueError, match=r"yielded must be an int in \[0, 20\]; got yielded=21"):
        s.load_state_dict({"yielded": 21})
    with pytest.raises(ValueError, match="build this sampler with compat='torch'"):
        DistributedSampler(range(40), num_replicas=2, rank=1).load_state_dict({"yielded": 1})


def test_our_compat_torch_state_round_trips_and_is_checked() -> None:
    s = DistributedSampler(range(30), num_replicas=3, rank=0, seed=2, compat="torch")
    it = iter(s)
    head = [next(it) for _ in range(4)]
    state = s.state_dict()
    assert state["yielded"] == 4
    t = DistributedSampler(range(30), num_replicas=3, rank=0, seed=2, compat="torch")
    t.load_state_dict(state)
    assert head + list(t) == list(DistributedSampler(range(30), 3, 0, seed=2, compat="torch"))
    with pytest.raises(ValueError, match=r"state\['yielded'\] must be consumed // "):
        t.load_state_dict({**state, "yielded": 5})


def test_torchdata_and_dataorder_continue_each_other() -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader.sampler")
    theirs = sdl.StatefulDistributedSampler(range(50), num_replicas=2, rank=0, seed=9)
    full = list(sdl.StatefulDistributedSampler(range(50), num_replicas=2, rank=0, seed=9))
    it = iter(theirs)
    head = [next(it) for _ in range(6)]
    ours = DistributedSampler(range(50), num_replicas=2, rank=0, seed=9, compat="torch")
    ours.load_state_dict(theirs.state_dict())  # torchdata -> dataorder
    it2 = iter(ours)
    middle = [next(it2) for _ in range(5)]
    back = sdl.StatefulDistributedSampler(range(50), num_replicas=2, rank=0, seed=9)
    back.load_state_dict(ours.state_dict())  # dataorder -> torchdata
    assert head + middle + list(back) == full


# -- 4b. NeMo bucket-sampler states ---------------------------------------------------------------
def _bucket_ds() -> BaseMultiresolutionDataset:
    return BaseMultiresolutionDataset.from_bucket_ids(
        np.arange(30) % 3, resolutions=[(64, 64), (128, 64), (64, 128)]
    )


def _nemo(ds: Any, **kw: Any) -> SequentialBucketSampler:
    return SequentialBucketSampler(
        ds, base_batch_size=2, drop_last=False, num_replicas=2, rank=1, seed=4, **kw
    )


def test_nemo_state_loads_in_compat_nemo() -> None:
    ds = _bucket_ds()
    s = _nemo(ds, compat="nemo")
    s.set_epoch(2)
    full = run_epoch(s)
    for k in (0, 3, len(full), len(full) + 5):
        t = _nemo(ds, compat="nemo")
        t.set_epoch(2)
        t.load_state_dict({"epoch": 2, "batches_yielded": k})
        assert run_epoch(t) == full[k:]
    u = _nemo(ds, compat="nemo")
    run_epoch(u, limit=3)
    assert u.state_dict()["batches_yielded"] == 3
    with pytest.raises(ValueError, match=r"state\['batches_yielded'\] must be the steps done"):
        _nemo(ds, compat="nemo").load_state_dict({**u.state_dict(), "batches_yielded": 2})
    with pytest.raises(ValueError, match="build this sampler with compat='nemo'"):
        _nemo(ds).load_state_dict({"epoch": 0, "batches_yielded": 1})
    with pytest.raises(ValueError, match=r"state\['batches_yielded'\] must be a non-negative int"):
        _nemo(ds, compat="nemo").load_state_dict({"epoch": 0, "batches_yielded": -1})


def test_nemo_and_dataorder_continue_each_other(tmp_path: Path) -> None:
    nemo_sampler = nemo_diffusion_module("sampler").SequentialBucketSampler
    cache = write_cache(tmp_path, [[item(*[(64, 64), (128, 64)][i % 2]) for i in range(23)]])
    nemo_ds, ours_ds = nemo_dataset(cache), BaseMultiresolutionDataset(cache)
    kw: dict[str, Any] = {"base_batch_size": 2, "drop_last": False, "seed": 11}
    full = [list(b) for b in nemo_sampler(nemo_ds, num_replicas=2, rank=0, **kw)]
    theirs = nemo_sampler(nemo_ds, num_replicas=2, rank=0, **kw)
    it = iter(theirs)
    head = [list(next(it)) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = SequentialBucketSampler(ours_ds, num_replicas=2, rank=0, compat="nemo", **kw)
    ours.load_state_dict(theirs.state_dict())  # NeMo -> dataorder
    middle = run_epoch(ours, limit=2)
    back = nemo_sampler(nemo_ds, num_replicas=2, rank=0, **kw)
    back.load_state_dict(ours.state_dict())  # dataorder -> NeMo (it reads epoch, batches_yielded)
    assert head + middle + [list(b) for b in back] == full


def test_nemo_random_crop_without_a_seed_runs_and_warns() -> None:
    pytest.importorskip("PIL")
    calc = MultiTierBucketCalculator(compat="nemo")
    img = np.zeros((100, 300, 3), dtype=np.uint8)
    with pytest.warns(UserWarning, match="unseeded generator and are not reproducible"):
        out, (x, y) = calc.resize_and_crop(img, 64, 64, "random")
    assert out.size == (64, 64)
    assert 0 <= x <= 128
    assert y == 0
    with pytest.raises(ValueError, match="needs seed="):
        MultiTierBucketCalculator().resize_and_crop(img, 64, 64, "random")  # default: explicit
