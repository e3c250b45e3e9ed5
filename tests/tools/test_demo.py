"""`dataorder demo`: the shipped data, the checks it makes (and that they can fail), the plot.

The two real runs (8 gloo processes per phase) go through the command line in a subprocess, as a
user runs them; one passes every check, one injects a classic bug and must fail with exit status 1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.llm.packing import PackedRows, PackedSampler
from dataorder.tools import demo
from dataorder.tools.demo import CHECKS, DemoConfig, MeshShape
from dataorder.tools.demo_checks import check_sampler
from dataorder.tools.plots import ScheduleBatch, plot_schedule

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "src" / "dataorder" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m dataorder ARGS`` in its own session, killed whole if it overruns."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataorder", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and every process it started
        proc.communicate()
        pytest.fail(f"dataorder {' '.join(args)} did not finish within {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- the shipped data -----------------------------------------------------------------------------
def test_shipped_data_regenerates_byte_for_byte(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "generate.py"), str(tmp_path)], check=True, timeout=60
    )
    for name in ("tokens.npy", "image_sizes.csv"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_shipped_data_matches_its_documentation() -> None:
    tokens = demo.load_tokens()
    assert tokens.shape == (410, 33)
    assert tokens.dtype == np.uint8
    assert int(tokens.max()) < 64
    widths, heights = demo.load_image_sizes()
    assert widths.shape == heights.shape == (3000,)
    ratio = widths / heights
    assert ratio.min() >= 1 / 3 - 0.01
    assert ratio.max() <= 3 + 0.01
    assert np.maximum(widths, heights).min() >= 512
    assert np.maximum(widths, heights).max() <= 4096
    readme = (DATA / "README.md").read_text()
    assert "SEED = 20260601" in readme
    assert "SEED = 20260601" in (DATA / "generate.py").read_text()


# -- configuration --------------------------------------------------------------------------------
def test_mesh_shape_parses_and_rejects() -> None:
    assert MeshShape.parse("4,2,1") == MeshShape(4, 2, 1)
    assert MeshShape.parse("2x2x2").world == 8
    for bad in ("2,2", "0,2,2", "a,b,c", "2,2,2,2"):
        with pytest.raises(
            ValueError, match=rf"^mesh must be three positive ints .*got mesh='{bad}'"
        ):
            MeshShape.parse(bad)
    with pytest.raises(ValueError, match="dp must be a positive int; got dp=0"):
        MeshShape(0, 1, 1)


def test_config_global_batch_is_shared_by_both_meshes() -> None:
    cfg = DemoConfig()
    assert cfg.global_batch_size == 16
    assert (cfg.accumulation(cfg.first_mesh), cfg.accumulation(cfg.mesh)) == (1, 2)
    odd = DemoConfig(first_mesh=MeshShape(3, 1, 1), mesh=MeshShape(2, 1, 1), micro_batch_size=2)
    assert odd.global_batch_size == 12
    assert (odd.accumulation(odd.first_mesh), odd.accumulation(odd.mesh)) == (2, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"micro_batch_size": 0},
            "micro_batch_size must be a positive int; got micro_batch_size=0",
        ),
        ({"seed": -1}, r"seed must be an int in \[0, 9223372036854775807\]; got seed=-1"),
        (
            {"timeout": 0},
            "timeout must be a positive number of seconds, at most 86400; got timeout=0",
        ),
        ({"samplers": ("nope",)}, "samplers must be distinct names among"),
        ({"samplers": ()}, "samplers must be distinct names among"),
        (
            {"inject_bug": "typo"},
            "inject_bug must be None or one of global-world, no-resume, skip-batches",
        ),
    ],
)
def test_config_validates(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DemoConfig(**kwargs)


def test_config_rejects_wrong_types() -> None:
    with pytest.raises(TypeError, match="timeout must be a positive number of seconds"):
        DemoConfig(timeout=True)
    with pytest.raises(TypeError, match="mesh must be a MeshShape"):
        DemoConfig(mesh=(2, 2, 2))  # type: ignore[arg-type]


# -- the parent's checks on synthetic records -----------------------------------------------------
def _record(rank: int, dp_rank: int, dp_size: int, replica: int, **sampler: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "verify": {"ok": True, "summary": "ok"},
        "dropped": 0,
        "padded": 0,
        "universe": 8,
        "losses": [1.0, 0.5],
        # what phase 0 gave DCP, and the digest of what phase 1 loaded
        "checkpoint": {"order": {"s": 1}, "model": "m"},
        "restored": "m",
    }
    base.update(sampler)
    base.setdefault("padding", [0] * len(base["batches"]))
    base.setdefault("buckets", [None] * len(base["batches"]))
    return {
        "rank": rank,
        "dp_rank": dp_rank,
        "dp_size": dp_size,
        "replica_rank": replica,
        "samplers": {"s": base},
    }


def _good_phases() -> list[list[dict[str, Any]]]:
    # phase 0: 2 DP ranks x 2 replicas read 0..3; phase 1: 1 DP rank x 4 replicas reads 4..7
    p0 = [
        _record(0, 0, 2, 0, batches=[[0], [2]]),
        _record(1, 0, 2, 1, batches=[[0], [2]]),
        _record(2, 1, 2, 0, batches=[[1], [3]]),
        _record(3, 1, 2, 1, batches=[[1], [3]]),
    ]
    p1 = [_record(r, 0, 1, r, batches=[[4, 5], [6, 7]]) for r in range(4)]
    return [p0, p1]


#: What the bucket samplers' entries declare (DEMO_SAMPLERS["buckets"]).
BUCKETED: dict[str, Any] = {"extra": ("lock_step",), "declared_padding": True}


def test_checks_pass_on_a_correct_job() -> None:
    result, schedule = check_sampler("s", _good_phases())
    assert result.ok, result.details
    assert (result.lost, result.repeated) == (0, 0)
    assert result.steps == (2, 2)
    assert "lock_step" not in result.checks  # not a bucket sampler
    assert [b.position for b in schedule] == [0, 0, 2, 2, 4, 6]


def test_checks_fail_on_each_kind_of_mistake() -> None:
    phases = _good_phases()
    phases[0][1]["samplers"]["s"]["batches"] = [[0], [3]]  # a TP peer read other data
    result, _ = check_sampler("s", phases)
    assert result.checks["replicas_identical"] is False
    detail = result.details["replicas_identical"]
    assert detail.startswith("phase 0: ")
    assert "(DP ranks [0])" in detail

    phases = _good_phases()
    longer = phases[1][0]["samplers"]["s"]
    longer.update(batches=[[4, 5], [6, 7], [0, 1]], padding=[0, 0, 0], buckets=[None] * 3)
    result, _ = check_sampler("s", phases)
    assert result.checks["equal_batches"] is False
    assert "phase 1: batch counts [2, 3]" in result.details["equal_batches"]

    phases = _good_phases()
    for r in phases[1]:
        r["samplers"]["s"]["batches"] = [[0, 5], [6, 7]]  # sample 0 again, sample 4 never
    result, _ = check_sampler("s", phases)
    assert result.checks["exactly_once"] is False
    assert (result.lost, result.repeated) == (1, 1)

    phases = _good_phases()
    phases[0][2]["samplers"]["s"]["checkpoint"]["order"] = {"s": 2}
    result, _ = check_sampler("s", phases)
    assert result.checks["one_checkpoint"] is False
    assert "saved 2 different order states" in result.details["one_checkpoint"]

    phases = _good_phases()
    phases[0][1]["samplers"]["s"]["checkpoint"]["model"] = "other"  # a replica diverged
    result, _ = check_sampler("s", phases)
    assert result.checks["one_checkpoint"] is False
    assert "held 2 different models and optimizers" in result.details["one_checkpoint"]

    for loaded, says in ((None, "2 processes did not load"), ("x", "loaded differ")):
        phases = _good_phases()
        for r in phases[1][:2]:
            r["samplers"]["s"]["restored"] = loaded
        result, _ = check_sampler("s", phases)
        assert result.checks["one_checkpoint"] is False
        assert says in result.details["one_checkpoint"]

    phases = _good_phases()
    phases[1][3]["samplers"]["s"]["verify"] = {"ok": False, "summary": "overlap"}
    result, _ = check_sampler("s", phases)
    assert result.checks["dp_disjoint"] is False
    assert "phase 1: overlap" in result.details["dp_disjoint"]


def test_lock_step_check_and_declared_padding() -> None:
    phases = _good_phases()
    for p, records in enumerate(phases):
        for r in records:
            r["samplers"]["s"]["buckets"] = [p, p]
    phases[1][0]["samplers"]["s"]["padding"] = [0, 1]
    phases[1][0]["samplers"]["s"]["batches"] = [[4, 5], [6, 6]]  # one declared repeat
    for r in phases[1]:
        r["samplers"]["s"]["batches"] = [[4, 5], [6, 6]]
        r["samplers"]["s"]["padding"] = [0, 1]
    phases[1][0]["samplers"]["s"]["dropped"] = 0
    result, schedule = check_sampler("s", phases, **BUCKETED)
    # sample 7 is never read: one lost; the repeat of 6 was declared
    assert (result.lost, result.repeated) == (1, 0)
    assert result.checks["lock_step"] is True
    assert {b.bucket for b in schedule} == {0, 1}
    phases[0][3]["samplers"]["s"]["buckets"] = [0, 5]
    result, _ = check_sampler("s", phases, **BUCKETED)
    assert result.checks["lock_step"] is False
    assert "phase 0 step 1: buckets [0, 5]" in result.details["lock_step"]
    # a check the entry does not ask for is not run, and the declared repeats are not trusted
    result, _ = check_sampler("s", phases)
    assert "lock_step" not in result.checks
    assert result.repeated == 1


def test_lock_step_fails_a_batch_that_names_no_bucket() -> None:
    phases = _good_phases()  # the records hold no bucket: a declared bucket sampler must fail
    result, _ = check_sampler("s", phases, **BUCKETED)
    assert result.checks["lock_step"] is False
    assert "phase 0 step 0: buckets [None]" in result.details["lock_step"]


def test_extra_checks_are_named_among_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="extra must name checks among lock_step, per_source, costs_dealt"
    ):
        check_sampler("s", _good_phases(), extra=("lock-step",))


# -- the packed phase's checks on records of real packed rows ------------------------------------
LENGTHS = [5, 3, 9, 2, 7, 12, 4, 6, 1, 8, 10, 3, 14, 2, 5, 7, 9, 3, 4, 11, 6, 2, 8, 5]
PACKED = {"extra": ("costs_dealt",), "batching": PackedRows(8)}


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))  # tuples become lists, as in a process's record


def _packed_phases() -> list[list[dict[str, Any]]]:
    """Rows of 8 tokens in global batches of 4: phase 0 trains 2 of them on 2 DP ranks x 2
    replicas (2 rows each), phase 1 the rest on 1 DP rank (2 rows, 2 micro-batches a step)."""
    kw: dict[str, Any] = {"seed": 0, "chunk": 4, "window": 8, "global_batch_size": 4}
    before = [PackedSampler(LENGTHS, 8, 2, r, 2, **kw) for r in range(2)]
    after = PackedSampler(LENGTHS, 8, 2, 0, 1, **kw)
    counts = {
        "universe": sum(LENGTHS),
        "dropped": after.tokens_dropped,
        "padded": after.tokens_padded,
    }
    p0 = []
    for d in range(2):
        batches = [before[d].batch_at(k) for k in range(2)]
        p0 += [_record(2 * d + t, d, 2, t, batches=_as_json(batches), **counts) for t in range(2)]
    rest = _as_json([after.batch_at(k) for k in range(4, after.steps_per_epoch)])
    return [p0, [_record(0, 0, 1, 0, batches=rest, **counts)]]


def _spans(phases: list[list[dict[str, Any]]], phase: int, rank: int) -> list[Any]:
    return phases[phase][rank]["samplers"]["s"]["batches"]  # type: ignore[no-any-return]


def test_packed_checks_pass_on_real_rows_and_report_the_dealing() -> None:
    phases = _packed_phases()
    result, schedule = check_sampler("s", phases, **PACKED)
    assert result.ok, result.details
    assert (result.unit, result.dataset_size) == ("token", sum(LENGTHS))
    assert (result.lost, result.repeated) == (0, 0)
    assert "tokens read" in result.details["exactly_once"]
    dealt = result.details["costs_dealt"]
    assert "phase 0 (2 ranks x 2 rows): worst" in dealt
    assert "phase 1 (1 rank x 2 rows): worst 1.000" in dealt
    # the plot shows the documents a batch's rows read
    assert set(schedule[0].samples) <= set(range(len(LENGTHS)))


def test_packed_token_check_fails_on_a_lost_or_repeated_span() -> None:
    phases = _packed_phases()
    row = _spans(phases, 1, 0)[0][0]
    _document, start, stop = row.pop()  # a span never trained on
    result, _ = check_sampler("s", phases, **PACKED)
    assert result.checks["exactly_once"] is False
    # the tokens the span held are lost, and the row holds as many more padding tokens
    assert (result.lost, result.repeated) == (stop - start, stop - start)

    phases = _packed_phases()
    batch = _spans(phases, 1, 0)[-1]
    replaced = batch[0]
    batch[0] = _as_json(_spans(phases, 0, 0)[0][0])  # a row of phase 0 again, after the restart
    result, _ = check_sampler("s", phases, **PACKED)
    assert result.checks["exactly_once"] is False
    assert result.lost == sum(b - a for _, a, b in replaced)
    assert result.repeated > 0


def test_packed_lock_step_fails_a_rank_with_fewer_rows() -> None:
    phases = _packed_phases()
    for t in (0, 1):  # both replicas of DP rank 1 take one row fewer at step 1
        _spans(phases, 0, 2 + t)[1].pop()
    result, _ = check_sampler("s", phases, **PACKED)
    assert result.checks["equal_batches"] is False
    assert (
        "batch sizes differ at 1 steps, first at step 1: [2, 1]" in result.details["equal_batches"]
    )


def test_costs_dealt_fails_a_dealing_by_position() -> None:
    # three full rows (cost 64 each) on one rank, three one-token rows on the other: the
    # costliest rank (192) exceeds the mean (97.5) plus the costliest row (64)
    heavy = [[[d, 0, 8]] for d in range(3)]
    light = [[[d, 0, 1]] for d in range(3, 6)]
    lengths = {"universe": 30, "dropped": 0, "padded": 0}
    phase = [
        _record(0, 0, 2, 0, batches=[heavy], **lengths),
        _record(1, 1, 2, 0, batches=[light], **lengths),
    ]
    result, _ = check_sampler("s", [phase], **PACKED)
    assert result.checks["costs_dealt"] is False
    assert (
        "phase 0 step 0: costliest rank 192 > mean 97.5 + costliest row 64"
        in (result.details["costs_dealt"])
    )
    swapped = [[heavy[0], heavy[1], light[0]], [heavy[2], light[1], light[2]]]
    for record, batch in zip(phase, swapped, strict=True):
        record["samplers"]["s"]["batches"] = [batch]
    result, _ = check_sampler("s", [phase], **PACKED)
    assert result.checks["costs_dealt"] is True, result.details["costs_dealt"]


# -- the plot -------------------------------------------------------------------------------------
def test_plot_schedule_writes_a_png(tmp_path: Path) -> None:
    rows = [
        ScheduleBatch("a", 0, r, 2, 4 * s, 4, (4 * s + r, 4 * s + r + 2), bucket=s % 3)
        for s in range(3)
        for r in range(2)
    ]
    rows.append(ScheduleBatch("a", 1, 0, 1, 12, 2, (12, None), padding=1, bucket=1))
    rows.append(ScheduleBatch("b", 0, 0, 1, 0, 2, (0, 1)))
    path = plot_schedule(rows, tmp_path / "s.png", title="t")
    assert path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="batches must hold at least one batch"):
        plot_schedule([], tmp_path / "empty.png")


def test_plot_needs_matplotlib_and_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(ImportError, match=r"pip install 'dataorder\[plots\]'"):
        plot_schedule([ScheduleBatch("a", 0, 0, 1, 0, 1, (0,))], "never.png")


# -- the real job ---------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.timeout(420)  # 80 s alone on 2 cores; under xdist another worker takes one of them
def test_demo_runs_and_every_check_passes(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run_cli(["demo", "--out", str(out), "--plain"], timeout=320)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout
    assert "Traceback" not in proc.stderr
    for name in CHECKS.values():
        assert name in proc.stdout  # the table's columns
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] is True
    results = {r["name"]: r for r in report["results"]}
    assert list(results) == list(demo.SAMPLERS)
    for r in results.values():
        assert all(r["checks"].values()), r["details"]
        assert (r["lost"], r["repeated"]) == (0, 0)
        assert min(r["steps"]) > 0
        assert r["loss"][1] < r["loss"][0]  # it trains
    assert results["buckets"]["checks"]["lock_step"] is True
    # the video phase trains on a set fitted to the clips and the first layout, shown beside its
    # preset: the fit pads at most 1 % of the clips, the preset's last batches many more
    video_line = r"video: (preset wan2\.1-480p|fitted): .* (\d+) padding slots"
    padding = re.findall(video_line, proc.stdout)
    assert [name for name, _ in padding] == ["preset wan2.1-480p", "fitted"], proc.stdout
    fitted_pads = int(padding[1][1])
    assert fitted_pads <= 0.01 * 783 < int(padding[0][1])
    assert results["video"]["padded"] == fitted_pads  # what the sampler padded is the fit's
    # the tail rules of the shipped 410 tokens at a global batch of 16 (data/README.md)
    assert (results["megatron-single"]["dropped"], results["megatron-single"]["padded"]) == (0, 6)
    assert (results["megatron-cyclic"]["dropped"], results["megatron-cyclic"]["padded"]) == (10, 0)
    # packed rows: every token of the shipped rows once, but the tail's, dealt by cost
    packed = results["packed"]
    assert (packed["unit"], packed["dataset_size"]) == ("token", 410 * 33)
    assert packed["checks"]["costs_dealt"] is True
    assert "phase 0 (4 ranks x 4 rows): worst" in packed["details"]["costs_dealt"]
    assert packed["dropped"] > 0  # the tail rows short of a global batch, counted
    # the mixture's corpus changes mid-run (a source added before the restart, one grown after
    # it): each pass still reads its rows once, and the trained batches are the uninterrupted
    # order's; inspect rebuilds the state from the log saved beside it
    assert "source 3 (62 rows) added at step 3, source 1 grown to 143 rows" in proc.stdout
    per_source = results["mixture"]["details"]["per_source"]
    assert "differ by at most 1" in per_source
    assert "the 25 global batches trained are the uninterrupted order's" in per_source
    log = out / "checkpoint" / "mixture.mixlog.npz"
    inspected = run_cli(
        ["inspect", str(out / "checkpoint" / "mixture.json"), "--log", str(log)], 60
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "log entry 1 of 3 (from step 3" in inspected.stdout
    assert (out / "schedule.png").read_bytes()[:8] == PNG_MAGIC
    # every process of phase 1 loaded one DCP checkpoint; its data order, beside it, is what
    # `dataorder inspect` explains
    assert (out / "checkpoint" / "megatron-cyclic" / ".metadata").is_file()
    ckpt = out / "checkpoint" / "megatron-cyclic.json"
    inspected = run_cli(["inspect", str(ckpt), "--plain"], timeout=60)
    assert inspected.returncode == 0, inspected.stderr
    assert "megatron_random" in inspected.stdout
    assert "12 of 25 done" in inspected.stdout  # phase 0 stopped half-way: 12 global batches
    # the packed state holds a fingerprint of the documents' lengths: the demo writes them
    lengths = out / "checkpoint" / "packed.lengths.npy"
    packed_state = out / "checkpoint" / "packed.json"
    inspected = run_cli(["inspect", str(packed_state), "--lengths", str(lengths)], timeout=60)
    assert inspected.returncode == 0, inspected.stderr
    assert "13 of 26 done" in inspected.stdout
    assert "next batch on each rank" in inspected.stdout
    # on the restart's 2 DP ranks, inspect shows the rows the restarted job trained on first
    args = ["inspect", str(packed_state), "--lengths", str(lengths), "--num-replicas", "2"]
    inspected = run_cli([*args, "--json"], timeout=60)
    assert inspected.returncode == 0, inspected.stderr
    shown = [r["items"] for r in json.loads(inspected.stdout)["next"]]
    after = [json.loads((out / "ranks" / "phase1" / f"rank{r}.json").read_text()) for r in range(8)]
    first = {r["dp_rank"]: r["samplers"]["packed"]["batches"][0] for r in after}
    assert shown == [first[0], first[1]]
    buckets = out / "checkpoint" / "buckets.json"
    # the buckets are fitted to the data: the demo writes their manifest beside the state, and the
    # preset's buckets are another dataset, which inspect refuses
    manifest = out / "checkpoint" / "buckets.manifest.tsv"
    inspected = run_cli(
        ["inspect", str(buckets), "--manifest", str(manifest), "--plain"], timeout=60
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "sequential_bucket" in inspected.stdout
    assert "next batch on each rank" in inspected.stdout
    preset = run_cli(
        ["inspect", str(buckets), "--sizes", str(DATA / "image_sizes.csv")], timeout=60
    )
    assert preset.returncode == 2
    assert "another configuration" in preset.stderr


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_demo_accounts_the_last_step_in_its_own_epoch(tmp_path: Path) -> None:
    # On dp=2 after dp=3 a step is 3 micro-batches and the epoch ends in the middle of one: the
    # pass runs out (moving the bucket sampler to epoch 1) before that step's batches are
    # accounted for, and their declared padding must still be epoch 0's.
    out = tmp_path / "odd"
    meshes = ["--first-mesh", "3,1,1", "--mesh", "2,1,1"]
    args = ["demo", "--out", str(out), "--plain", "--no-plot", "--samplers", "buckets", *meshes]
    proc = run_cli(args, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = json.loads((out / "report.json").read_text())["results"]
    assert result["micro_batches"][1] % 3, "the last step must be short for this test to bite"
    assert all(result["checks"].values()), result["details"]
    assert (result["lost"], result["repeated"]) == (0, 0)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_demo_catches_the_global_world_mistake(tmp_path: Path) -> None:
    # Seed 003's trap: samplers built with the global rank and world size under TP. (A restart
    # that forgets the checkpoint, --inject-bug no-resume, fails "each once": the synthetic
    # records above cover that check without another 16 processes.)
    out = tmp_path / "bug"
    # one checkpoint too: the TP replicas trained on different data, so their models diverged
    failing = {"dp_disjoint", "replicas_identical", "one_checkpoint", "exactly_once"}
    args = ["demo", "--out", str(out), "--plain", "--no-plot", "--samplers", "megatron-cyclic"]
    proc = run_cli([*args, "--inject-bug", "global-world"], timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SOME CHECKS FAILED" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    (result,) = report["results"]
    assert {k for k, ok in result["checks"].items() if not ok} == failing
    for key in failing:
        assert f"FAILED megatron-cyclic {CHECKS[key]}" in proc.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_demo_catches_a_per_rank_resume_of_packed_rows(tmp_path: Path) -> None:
    # The classic elastic-resume mistake: the restart loads the model and optimizer but resumes
    # the data by skipping as many micro-batches as each rank had read. On half the ranks that
    # is half as far into the epoch: the token check fails, and only it.
    out = tmp_path / "skip"
    meshes = ["--first-mesh", "2,1,1", "--mesh", "1,1,1"]
    args = ["demo", "--out", str(out), "--plain", "--no-plot", "--samplers", "packed", *meshes]
    proc = run_cli([*args, "--inject-bug", "skip-batches"], timeout=100)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (result,) = json.loads((out / "report.json").read_text())["results"]
    assert {k for k, ok in result["checks"].items() if not ok} == {"exactly_once"}
    assert result["repeated"] > 0
    assert f"FAILED packed {CHECKS['exactly_once']}: " in proc.stdout
    assert "tokens read" in proc.stdout
