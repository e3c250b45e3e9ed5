"""The LLM micro-batch samplers' behaviour, pinned: batches, states, counts and resumes.

For a grid of configurations of :class:`MegatronPretrainingSampler`,
:class:`MegatronPretrainingRandomSampler` (every order and compat mode), :class:`BlendedSampler`
(weights, a mixture schedule, a batch-size schedule, a MixtureLog, corpus changes) and
:class:`PackedSampler` (one corpus and a mixture of corpora), each record holds what every rank
yields for two epochs, ``len()``, the counters, ``consumed_samples``, the ``state_dict()`` bytes
at a few steps, ``state_at``/``state_after``, ``describe_progress`` and what a resume through
``from_state``, ``load_state_dict`` and ``consumed_samples=`` yields next. The file
``golden_llm_samplers.json`` beside this one holds the sha256 of each record, written on the
code before the sampler layer was rebuilt from sources and batchings: the rebuild must keep
every one byte-identical (0.2 and 0.3 states keep loading).

Regenerate (only for an intended change of behaviour, which then needs a new state version)::

    PYTHONPATH=src python tests/llm/test_golden_samplers.py --write
    PYTHONPATH=src python tests/llm/test_golden_samplers.py --dump /tmp/records.json  # to diff
"""

# ruff: noqa: B023  (every lambda here is called at once, in the loop that binds it)
from __future__ import annotations

import hashlib
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dataorder.llm import (
    BatchSizeSchedule,
    BlendedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)
from dataorder.llm.mixlog import MixtureLog
from dataorder.llm.mixture import MixtureSchedule, Ramp
from dataorder.llm.packing import PackedSampler

GOLDEN = Path(__file__).with_name("golden_llm_samplers.json")
BATCHES = 6  # first batches of each rank per epoch

# lengths of three small corpora (tokens per document)
WEB = [5, 3, 9, 2, 7, 12, 1, 4, 8, 6, 3, 10, 2, 5, 7, 9, 11, 4, 6, 2]
CODE = [17, 4, 6, 2, 9, 3, 3, 8, 1, 14, 5, 5]
BOOKS = [40, 3, 25, 7, 16]


class _Hook:
    """A dataset with Megatron-LM's ``set_epoch`` hook: the calls are recorded."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.calls.append(epoch)


def _log() -> MixtureLog:
    log = MixtureLog([3, 1])
    log.set_weights(2, [1, 1])
    log.set_weights(5, [0, 1])
    return log


def _log3() -> MixtureLog:
    log = MixtureLog([1, 1, 1])
    log.set_weights(3, [2, 0, 1])
    return log


def _corpus_log() -> MixtureLog:
    log = MixtureLog([1, 1], sizes=[6, 4])
    log.grow(2, 1, 9)
    log.retire(4, 0)
    return log


RAMP = MixtureSchedule([(0, [3, 1]), (8, Ramp([3, 1], [1, 3])), (24, [1, 3])])

# name -> (class, positional/keyword arguments without rank and size, dp sizes, from_state given)
Config = tuple[
    type[Any], Callable[[], dict[str, Any]], tuple[int, ...], Callable[[], dict[str, Any]]
]


def _m(**kw: Any) -> Callable[[], dict[str, Any]]:
    return lambda: dict(kw)


def _none() -> dict[str, Any]:
    return {}


CONFIGS: dict[str, Config] = {
    # -- MegatronPretrainingSampler --------------------------------------------------------
    "single n10 mbs2 drop": (
        MegatronPretrainingSampler,
        _m(total_samples=10, micro_batch_size=2),
        (1, 2, 3),
        _none,
    ),
    "single n10 mbs2 pad": (
        MegatronPretrainingSampler,
        _m(total_samples=10, micro_batch_size=2, drop_last=False),
        (1, 2, 3),
        _none,
    ),
    "single n37 mbs3 gbs12 drop": (
        MegatronPretrainingSampler,
        _m(total_samples=37, micro_batch_size=3, global_batch_size=12),
        (1, 2, 4),
        _none,
    ),
    "single n37 mbs3 gbs12 keep": (
        MegatronPretrainingSampler,
        _m(total_samples=37, micro_batch_size=3, global_batch_size=12, drop_last=False),
        (1, 2, 4),
        _none,
    ),
    "single n37 mbs3 gbs12 pad": (
        MegatronPretrainingSampler,
        _m(
            total_samples=37,
            micro_batch_size=3,
            global_batch_size=12,
            drop_last=False,
            pad_samples_to_global_batch_size=True,
        ),
        (1, 2, 4),
        _none,
    ),
    "single n36 mbs1 gbs6": (
        MegatronPretrainingSampler,
        _m(total_samples=36, micro_batch_size=1, global_batch_size=6),
        (1, 2, 3, 6),
        _none,
    ),
    # -- MegatronPretrainingRandomSampler -------------------------------------------------
    "random n10 mbs2": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=10, micro_batch_size=2),
        (1, 2),
        _none,
    ),
    "random n41 mbs2 seed7 pad": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=41, micro_batch_size=2, seed=7, drop_last=False),
        (1, 2, 3),
        _none,
    ),
    "random n41 mbs2 gbs12 pad": (
        MegatronPretrainingRandomSampler,
        _m(
            total_samples=41,
            micro_batch_size=2,
            seed=3,
            global_batch_size=12,
            drop_last=False,
            pad_samples_to_global_batch_size=True,
        ),
        (1, 2, 3),
        _none,
    ),
    "random n41 mbs2 gbs12 drop": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=41, micro_batch_size=2, seed=3, global_batch_size=12),
        (1, 2, 3, 6),
        _none,
    ),
    "random sharded n41 mbs2": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=41, micro_batch_size=2, seed=5, data_sharding=True),
        (1, 2, 3),
        _none,
    ),
    "random sharded n41 pad": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=41, micro_batch_size=2, seed=5, data_sharding=True, drop_last=False),
        (1, 2, 3),
        _none,
    ),
    "random nemo n10 mbs2": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=10, micro_batch_size=2, compat="nemo"),
        (1, 2),
        _none,
    ),
    "random nemo n43 mbs3 gbs": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=43, micro_batch_size=3, seed=11, compat="nemo", global_batch_size=6),
        (1, 2),
        _none,
    ),
    "random nemo n43 mbs1 keep": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=43, micro_batch_size=1, seed=2, compat="nemo", drop_last=False),
        (1,),
        _none,
    ),
    "random megatron sharded": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=40, micro_batch_size=2, compat="megatron", data_sharding=True),
        (1, 2, 4),
        _none,
    ),
    "random megatron strided": (
        MegatronPretrainingRandomSampler,
        _m(total_samples=40, micro_batch_size=2, compat="megatron", data_sharding=False),
        (1, 2, 4),
        _none,
    ),
    "random hook": (
        MegatronPretrainingRandomSampler,
        lambda: {"total_samples": 12, "micro_batch_size": 2, "dataset": _Hook()},
        (2,),
        _none,
    ),
    # -- BlendedSampler ---------------------------------------------------------------------
    "blend 2 sources": (
        BlendedSampler,
        _m(
            sizes=[6, 4],
            weights=[3, 1],
            micro_batch_size=2,
            global_batch_size=4,
            seed=0,
            total_samples=8,
        ),
        (1, 2),
        lambda: {"sizes": [6, 4], "weights": [3, 1]},
    ),
    "blend 3 sources default total": (
        BlendedSampler,
        _m(
            sizes=[13, 7, 30],
            weights=[0.5, 0.2, 0.3],
            micro_batch_size=1,
            global_batch_size=6,
            seed=9,
        ),
        (1, 2, 3, 6),
        lambda: {"sizes": [13, 7, 30], "weights": [0.5, 0.2, 0.3]},
    ),
    "blend schedule ramp": (
        BlendedSampler,
        _m(
            sizes=[20, 11],
            weights=RAMP,
            micro_batch_size=2,
            global_batch_size=8,
            seed=4,
            total_samples=24,
        ),
        (1, 2, 4),
        lambda: {"sizes": [20, 11], "weights": RAMP},
    ),
    "blend batch-size schedule": (
        BlendedSampler,
        lambda: {
            "sizes": [20, 11],
            "weights": [1, 1],
            "micro_batch_size": 1,
            "global_batch_size": BatchSizeSchedule.from_step_schedule("0:2 3:4 6:8"),
            "seed": 1,
            "total_samples": 30,
        },
        (1, 2),
        lambda: {
            "sizes": [20, 11],
            "weights": [1, 1],
            "global_batch_size": BatchSizeSchedule.from_step_schedule("0:2 3:4 6:8"),
        },
    ),
    "blend mixture log": (
        BlendedSampler,
        lambda: {
            "sizes": [9, 9],
            "weights": _log(),
            "micro_batch_size": 1,
            "global_batch_size": 4,
            "seed": 2,
            "total_samples": 16,
        },
        (1, 2, 4),
        lambda: {"sizes": [9, 9], "weights": _log()},
    ),
    "blend corpus log": (
        BlendedSampler,
        lambda: {
            "sizes": [6, 4],
            "weights": _corpus_log(),
            "micro_batch_size": 1,
            "global_batch_size": 2,
            "seed": 3,
            "total_samples": 12,
        },
        (1, 2),
        lambda: {"sizes": [6, 4], "weights": _corpus_log()},
    ),
    # -- PackedSampler: one corpus -----------------------------------------------------------
    "packed web drop": (
        PackedSampler,
        _m(lengths=WEB, seq_len=8, micro_batch_size=1, seed=0, chunk=2, window=4),
        (1, 2, 3),
        lambda: {"lengths": WEB},
    ),
    "packed web pad": (
        PackedSampler,
        _m(lengths=WEB, seq_len=8, micro_batch_size=2, seed=1, chunk=2, window=4, drop_last=False),
        (1, 2, 3),
        lambda: {"lengths": WEB},
    ),
    "packed web gbs pad": (
        PackedSampler,
        _m(
            lengths=WEB,
            seq_len=8,
            micro_batch_size=1,
            global_batch_size=4,
            seed=1,
            chunk=2,
            window=4,
            drop_last=False,
            pad_samples_to_global_batch_size=True,
        ),
        (1, 2, 4),
        lambda: {"lengths": WEB},
    ),
    "packed web gbs keep": (
        PackedSampler,
        _m(
            lengths=WEB,
            seq_len=8,
            micro_batch_size=1,
            global_batch_size=4,
            seed=1,
            chunk=2,
            window=4,
            drop_last=False,
        ),
        (1, 2, 4),
        lambda: {"lengths": WEB},
    ),
    "packed web gbs drop": (
        PackedSampler,
        _m(
            lengths=WEB,
            seq_len=8,
            micro_batch_size=1,
            global_batch_size=4,
            seed=1,
            chunk=2,
            window=4,
        ),
        (1, 2, 4),
        lambda: {"lengths": WEB},
    ),
    "packed never truncate": (
        PackedSampler,
        _m(lengths=CODE, seq_len=8, micro_batch_size=1, seed=2, split="never", chunk=1, window=4),
        (1, 2),
        lambda: {"lengths": CODE},
    ),
    "packed never drop": (
        PackedSampler,
        _m(
            lengths=CODE,
            seq_len=8,
            micro_batch_size=1,
            seed=2,
            split="never",
            long_documents="drop",
            chunk=1,
            window=4,
            drop_last=False,
        ),
        (1, 2),
        lambda: {"lengths": CODE},
    ),
    # -- PackedSampler: mixtures -------------------------------------------------------------
    "packed mixture weights": (
        PackedSampler,
        lambda: {
            "lengths": None,
            "seq_len": 8,
            "micro_batch_size": 1,
            "global_batch_size": 4,
            "seed": 5,
            "chunk": 2,
            "window": 4,
            "mixture": ([WEB, CODE], [3, 1]),
        },
        (1, 2, 4),
        lambda: {"mixture": ([WEB, CODE], [3, 1])},
    ),
    "packed mixture total rows": (
        PackedSampler,
        lambda: {
            "lengths": None,
            "seq_len": 16,
            "micro_batch_size": 2,
            "global_batch_size": 4,
            "seed": 6,
            "chunk": 1,
            "window": 3,
            "mixture": ([WEB, CODE, BOOKS], [1, 1, 2]),
            "total_rows": 12,
        },
        (1, 2),
        lambda: {"mixture": ([WEB, CODE, BOOKS], [1, 1, 2])},
    ),
    "packed mixture schedule": (
        PackedSampler,
        lambda: {
            "lengths": None,
            "seq_len": 8,
            "micro_batch_size": 1,
            "global_batch_size": BatchSizeSchedule.from_step_schedule("0:2 2:4"),
            "seed": 7,
            "chunk": 2,
            "window": 4,
            "mixture": ([WEB, CODE], RAMP),
        },
        (1, 2),
        lambda: {
            "mixture": ([WEB, CODE], RAMP),
            "global_batch_size": BatchSizeSchedule.from_step_schedule("0:2 2:4"),
        },
    ),
    "packed mixture log": (
        PackedSampler,
        lambda: {
            "lengths": None,
            "seq_len": 8,
            "micro_batch_size": 1,
            "global_batch_size": 3,
            "seed": 8,
            "chunk": 1,
            "window": 4,
            "mixture": ([WEB, CODE, BOOKS], _log3()),
        },
        (1, 3),
        lambda: {"mixture": ([WEB, CODE, BOOKS], _log3())},
    ),
}

_COMMON = (
    "batching",
    "consumed_samples",
    "data_parallel_rank",
    "data_parallel_size",
    "dp_rank",
    "elastic",
    "max_epoch",
    "micro_batch_size",
    "remaining",
    "state_kind",
    "layout_info()",
    "order_config()",
)
_MEGATRON = (
    *_COMMON,
    "blocks",
    "drop_last",
    "global_batch_size",
    "micro_batch_times_data_parallel_size",
    "pad_samples_to_global_batch_size",
    "samples_dropped",
    "samples_padded",
    "total_samples",
)
# the public attributes each class has (a name added later is not behaviour)
_PROBES: dict[type[Any], tuple[str, ...]] = {
    MegatronPretrainingSampler: (*_MEGATRON, "get_start_end_idx()"),
    MegatronPretrainingRandomSampler: (*_MEGATRON, "compat", "data_sharding", "seed"),
    BlendedSampler: (
        *_COMMON,
        "consumed_per_source()",
        "num_sources",
        "samples_dropped",
        "samples_padded",
        "seed",
        "sizes",
        "total_samples",
    ),
    PackedSampler: (
        *_COMMON,
        "chunk",
        "consumed_per_source()",
        "documents_split",
        "drop_last",
        "global_batch_size_field",
        "long_documents",
        "pad_samples_to_global_batch_size",
        "seed",
        "seq_len",
        "split",
        "tokens_dropped",
        "tokens_padded",
        "total_rows",
        "versions",
        "window",
    ),
}


def _counters(s: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _PROBES[type(s)]:
        try:
            value = getattr(s, name.removesuffix("()"))
            out[name] = value() if name.endswith("()") else value
        except (ValueError, TypeError) as err:  # a value a sampler refuses is behaviour too
            out[name] = f"{type(err).__name__}: {err}"
    return out


def _build(cls: type[Any], kwargs: dict[str, Any], rank: int, dp: int, **extra: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**kwargs, data_parallel_rank=rank, data_parallel_size=dp, **extra)


def _take(it: Any, n: int) -> list[Any]:
    out = []
    for batch in it:
        out.append(batch)
        if len(out) == n:
            break
    return out


def _outcome(way: Callable[[], Any], read: Callable[[Any], Any] | None = None) -> Any:
    """What one way into a run gives, as plain data: ``way()`` (a state, a rebuilt or loaded
    sampler), passed through ``read`` if given, or the text of the error that refused it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = way()
            return got if read is None else read(got)
    except (ValueError, TypeError) as err:  # a refusal is behaviour too
        return f"{type(err).__name__}: {err}"


def _next(sampler: Any) -> list[Any]:
    return _take(iter(sampler), 2)


def _loaded(cls: type[Any], kwargs: dict[str, Any], rank: int, dp: int, text: str) -> Any:
    sampler = _build(cls, kwargs, rank, dp)
    sampler.load_state_dict(json.loads(text))
    return sampler


def record(name: str) -> dict[str, Any]:
    """Everything the configuration ``name`` does, as plain data."""
    cls, make, dps, given = CONFIGS[name]
    out: dict[str, Any] = {}
    for dp in dps:
        per_rank: list[Any] = []
        for rank in range(dp):
            s = _build(cls, make(), rank, dp)
            r: dict[str, Any] = {"len": len(s), "repr": repr(s), "start": _counters(s)}
            epochs = []
            for epoch in (0, 1):
                s.set_epoch(epoch)
                batches = _take(iter(s), BATCHES)
                epochs.append({"batches": batches, "len": len(s), "counters": _counters(s)})
                epochs[-1]["state"] = json.dumps(s.state_dict())
            r["epochs"] = epochs
            r["describe"] = s.describe_progress()
            r["batch_at"] = [_outcome(lambda k=k: s.batch_at(k, epoch=1)) for k in (0, 1)]
            hook = getattr(s, "_dataset", None)
            if isinstance(hook, _Hook):
                r["hook"] = list(hook.calls)
            per_rank.append(r)
        out[f"dp{dp}"] = per_rank
        out[f"dp{dp} resume"] = _resumes(cls, make, given, dp)
    return out


def _resumes(
    cls: type[Any], make: Callable[[], dict[str, Any]], given: Callable[[], dict[str, Any]], dp: int
) -> dict[str, Any]:
    """States at a few steps on rank 0 and what each resume yields next on every rank (and on
    another data-parallel size)."""
    s = _build(cls, make(), 0, dp)
    out: dict[str, Any] = {}
    it = iter(s)
    for step in range(1, 4):
        if next(it, None) is None:
            break
        state = s.state_dict()
        text = json.dumps(state)
        at: dict[str, Any] = {"state": text, "consumed_samples": s.consumed_samples}
        at["state_at"] = _outcome(lambda: s.state_at(0, step), json.dumps)
        at["state_after"] = _outcome(lambda: s.state_after(state, 1), json.dumps)
        at["state_after_2"] = _outcome(lambda: s.state_after(state, 2), json.dumps)
        count = s.consumed_samples
        nxt = []
        for rank in range(dp):
            nxt.append(_outcome(lambda r=rank: cls.from_state(state, rank=r, **given()), _next))
            nxt.append(
                _outcome(
                    lambda r=rank: _loaded(cls, make(), r, dp, text),
                    lambda b: (_next(b), b.consumed_samples, json.dumps(b.state_dict())),
                )
            )
            nxt.append(
                _outcome(lambda r=rank: _build(cls, make(), r, dp, consumed_samples=count), _next)
            )
        for other in (1, 2 * dp):
            nxt.append(
                _outcome(
                    lambda o=other: cls.from_state(state, rank=0, dp_size=o, **given()),
                    lambda b: (_next(b), json.dumps(b.state_dict())),
                )
            )
        at["next"] = nxt
        out[f"step {step}"] = at
    # a state of another configuration is refused, naming the field
    wrong = dict(s.state_dict())
    key = next(k for k in wrong if k.startswith("config."))
    wrong[key] = "x" if isinstance(wrong[key], int) else 12345
    out["refused"] = _outcome(lambda: _build(cls, make(), 0, dp).load_state_dict(wrong))
    return out


def digest_of(name: str) -> str:
    """The sha256 of :func:`record`'s JSON."""
    text = json.dumps(record(name), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_llm_sampler_behaviour_is_unchanged(name: str) -> None:
    expected = json.loads(GOLDEN.read_text())
    assert name in expected, f"{name!r} has no golden record: regenerate the file"
    assert digest_of(name) == expected[name], (
        f"{name}: batches, states, counts or resumes differ from the golden record "
        f"(dump both with `python {Path(__file__).name} --dump FILE` and diff)"
    )


def test_every_golden_record_has_a_configuration() -> None:
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(CONFIGS)


if __name__ == "__main__":  # pragma: no cover - regenerates the golden file
    if sys.argv[1:2] == ["--write"]:
        GOLDEN.write_text(json.dumps({n: digest_of(n) for n in sorted(CONFIGS)}, indent=1) + "\n")
    elif sys.argv[1:2] == ["--dump"]:
        Path(sys.argv[2]).write_text(
            json.dumps({n: record(n) for n in sorted(CONFIGS)}, indent=1, default=repr)
        )
    else:
        raise SystemExit("usage: test_golden_samplers.py --write | --dump FILE")
