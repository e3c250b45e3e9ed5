"""``dataorder inspect`` on what a training run saves: a ``torch.save`` file, a
``torch.distributed.checkpoint`` folder holding an ``OrderState``; and what it says, in words a
reader takes at face value (no size of 0 under a layout of 4, a bucket named as a bucket of the
set) and in ``--json`` as numbers."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import BucketSampler
from dataorder.integrations.dcp import OrderState
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.tools.cli import main
from dataorder.tools.demo_data import load_image_sizes
from dataorder.tools.output import EXIT_USAGE


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _megatron(steps: int = 2) -> MegatronPretrainingRandomSampler:
    s = MegatronPretrainingRandomSampler(1000, 4, 0, 4, seed=9)
    it = iter(s)
    for _ in range(steps):
        next(it)
    return s


def _dcp_save(app_state: dict[str, object], folder: Path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming ... a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(app_state, checkpoint_id=str(folder))  # type: ignore[attr-defined]


def _expected_next(state: dict[str, object], world: int) -> list[list[int]]:
    out = []
    for r in range(world):
        t = MegatronPretrainingRandomSampler(1000, 4, r, world, seed=9)
        t.load_state_dict(state)
        out.append(next(iter(t)))
    return out


def test_a_dcp_folder_is_read_for_its_order_state_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    s = _megatron()
    model = {"w": torch.arange(6.0), "b": torch.zeros(2)}
    _dcp_save({"model": model, "data": OrderState(s)}, tmp_path / "ckpt")
    code, out, err = run(capsys, "inspect", str(tmp_path / "ckpt"), "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["found_at"] == "data.sampler"
    assert report["state"] == s.state_dict()
    assert [r["items"] for r in report["next"]] == _expected_next(s.state_dict(), 4)
    code, out, err = run(capsys, "inspect", str(tmp_path / "ckpt"), "--plain")
    assert (code, err) == (0, "")
    assert "2 of 62 done; 60 left on every rank" in out


def test_a_folder_without_dcp_metadata_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "inspect", str(tmp_path))
    assert (code, out) == (EXIT_USAGE, "")
    assert err.count("\n") == 1
    assert "without .metadata" in err


def test_a_torch_save_file_is_read_with_weights_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    s = _megatron(3)
    torch.save({"model": {"w": torch.ones(3)}, "data": OrderState(s).state_dict()},
               tmp_path / "ckpt.pt")  # fmt: skip
    code, out, err = run(capsys, "inspect", str(tmp_path / "ckpt.pt"), "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["found_at"] == "data.sampler"
    assert [r["items"] for r in report["next"]] == _expected_next(s.state_dict(), 4)
    # a pickle of an arbitrary object is refused, never unpickled
    with (tmp_path / "evil.pt").open("wb") as f:
        pickle.dump({"data": _Arbitrary()}, f, protocol=2)
    code, out, err = run(capsys, "inspect", str(tmp_path / "evil.pt"))
    assert (code, out) == (EXIT_USAGE, "")
    assert "weights_only=True" in err
    assert err.count("\n") == 1


class _Arbitrary:
    pass


def test_json_gives_numbers_as_numbers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    s = _megatron()
    (tmp_path / "s.json").write_text(json.dumps(s.state_dict()))
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"), "--num-replicas", "2",
                       "--json")  # fmt: skip
    assert code == 0
    report = json.loads(out)
    assert report["progress"] == {"consumed": 32}
    assert report["layout"] == {"micro_batch_size": 4, "data_parallel_size": 4}
    assert report["epoch"] == 0
    assert report["version"] == 1
    assert report["fingerprint_matches"] is True
    cursor = report["cursor"]
    assert (cursor["steps_done"], cursor["steps_per_epoch"], cursor["steps_left"]) == (4, 125, 121)
    assert (cursor["data_parallel_size"], cursor["consumed_samples"]) == (2, 32)
    assert cursor["elastic_resume"] is True
    assert report["config"]["seed"] == 9
    assert report["config"]["total_samples"] == 1000


def test_a_config_field_the_order_ignores_is_not_shown_as_a_size_of_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    s = _megatron()
    assert s.state_dict()["config.data_parallel_size"] == 0  # what the state records
    (tmp_path / "s.json").write_text(json.dumps(s.state_dict()))
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"), "--plain")
    assert code == 0
    assert "data_parallel_size=0" not in out
    assert "micro_batch_size=0" not in out
    assert "layout            micro_batch_size=4, data_parallel_size=4" in out
    assert "not in the order  data_parallel_size, micro_batch_size" in out
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"), "--json")
    report = json.loads(out)
    assert "data_parallel_size" not in report["config"]
    assert report["not_in_the_order"] == ["data_parallel_size", "micro_batch_size"]


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BaseMultiresolutionDataset]:
    w, h = load_image_sizes()
    path = tmp_path_factory.mktemp("sizes") / "sizes.csv"
    path.write_text("width,height\n" + "".join(f"{a},{b}\n" for a, b in zip(w, h, strict=True)))
    calc = MultiTierBucketCalculator.from_preset("1024p")
    return path, BaseMultiresolutionDataset.from_sizes(w, h, calc)


@pytest.mark.parametrize("order", ["sequential", "interleaved"])
def test_a_bucket_position_names_the_bucket_of_the_set(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    sizes: tuple[Path, BaseMultiresolutionDataset],
    order: str,
) -> None:
    csv, dataset = sizes
    s = BucketSampler(dataset, base_batch_size=4, num_replicas=2, rank=0, bucket_order=order,
                      seed=1, drop_last=False)  # fmt: skip
    it = iter(s)
    for _ in range(40):
        next(it)
    (tmp_path / "b.json").write_text(json.dumps(s.state_dict()))
    code, out, err = run(capsys, "inspect", str(tmp_path / "b.json"), "--sizes", str(csv),
                         "--plain")  # fmt: skip
    assert code == 0, err
    (position,) = [line for line in out.splitlines() if line.startswith("  position")]
    buckets = len(dataset.calculator.get_all_buckets())
    plan = s.epoch_plan(0).plan
    runs, used = plan.num_runs, len(set(plan.buckets.tolist()))
    if order == "sequential":  # one run per bucket: the bucket's place among those in use
        assert f"the 6th of {used} in epoch 0's order" in position
        assert "run " not in position
    else:  # many runs of the set's buckets: said as runs, never as "bucket k of <runs>"
        assert runs > buckets
        assert "run " in position
        assert f" of {runs} in epoch 0's order" in position
        assert f"of {runs} buckets" not in out
        assert f"the set's {buckets} buckets" in position
