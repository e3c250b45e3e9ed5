"""The generic ``from_state`` and ``load_state_dict`` of :mod:`dataorder.core.assembly`, over
every registered sampler kind: what a caller gets for a keyword of the wrong value, a state with
a key cut out, and a state of another configuration of the same class.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dataorder.core.assembly import SAMPLERS
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.packing import PackedSampler
from dataorder.llm.vsl import VariableLengthSampler
from dataorder.parallel.distributed import DistributedSampler

LENGTHS = [5, 3, 9, 2, 7, 100, 1, 40] * 4
VSL_LENGTHS = [70, 130, 20, 300, 45, 16, 64, 200] * 4
DATASET = BaseMultiresolutionDataset.from_bucket_ids(
    np.array([0] * 20 + [1] * 20), [[512, 512], [640, 384]]
)

#: kind -> (make(rank, dp_size), what from_state must be given)
KINDS: dict[str, tuple[Callable[[int, int], Any], dict[str, Any]]] = {
    "megatron_single": (lambda r, d: MegatronPretrainingSampler(64, 2, r, d), {}),
    "megatron_random": (lambda r, d: MegatronPretrainingRandomSampler(64, 2, r, d, seed=3), {}),
    "distributed": (lambda r, d: DistributedSampler(range(40), num_replicas=d, rank=r), {}),
    "sequential_bucket": (
        lambda r, d: SequentialBucketSampler(DATASET, base_batch_size=2, num_replicas=d, rank=r),
        {"dataset": DATASET},
    ),
    "blended": (
        lambda r, d: BlendedSampler([20, 30], [1, 1], 2, r, d, 8, seed=3),
        {"sizes": [20, 30], "weights": [1, 1]},
    ),
    "packed": (
        lambda r, d: PackedSampler(LENGTHS, 16, 2, r, d, seed=3, chunk=2, window=8),
        {"lengths": LENGTHS},
    ),
    "variable_length": (
        lambda r, d: VariableLengthSampler(
            VSL_LENGTHS, 64, 128, r, d, seed=3, min_seq_len=16, interleave_unit=2
        ),
        {"lengths": VSL_LENGTHS},
    ),
}


def test_every_kind_is_here() -> None:
    ours = {kind for kind, cls in SAMPLERS.items() if cls.__module__.startswith("dataorder.")}
    assert ours == set(KINDS)  # tests may register toy kinds of their own (test_assembly.py)


def _state(kind: str) -> dict[str, Any]:
    make, _ = KINDS[kind]
    sampler = make(0, 2)
    next(iter(sampler))
    state: dict[str, Any] = json.loads(json.dumps(sampler.state_dict()))
    return state


def _rebuild(kind: str, state: dict[str, Any], **kw: Any) -> Any:
    _, given = KINDS[kind]
    return SAMPLERS[kind].from_state(state, **given, **kw)


@pytest.mark.parametrize("kind", list(KINDS))
def test_from_state_rebuilds_its_own_state(kind: str) -> None:
    state = _state(kind)
    assert _rebuild(kind, state, rank=1).state_dict() == state


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(
    ("kw", "exc", "message"),
    [
        ({"dp_size": 0}, ValueError, "dp_size must be a positive int; got dp_size=0"),
        ({"dp_size": True}, TypeError, "dp_size must be a positive int; got dp_size=True"),
        ({"rank": -1}, ValueError, "rank must be a non-negative int; got rank=-1"),
        ({"rank": 1.0}, TypeError, "rank must be a non-negative int; got rank=1.0"),
    ],
)
def test_from_state_names_a_bad_rank_or_size(
    kind: str, kw: dict[str, Any], exc: type[Exception], message: str
) -> None:
    """``dp_size=0`` (and ``micro_batch_size=0``, ``False``) were replaced by the state's value
    through ``or``: a caller's mistake silently ignored."""
    with pytest.raises(exc) as info:
        _rebuild(kind, _state(kind), **kw)
    assert message in str(info.value)


@pytest.mark.parametrize("value", [0, False])
@pytest.mark.parametrize("kind", ["megatron_single", "megatron_random", "blended", "packed"])
def test_from_state_passes_a_falsy_layout_value_to_the_constructor(kind: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="micro_batch_size must be"):
        _rebuild(kind, _state(kind), micro_batch_size=value)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_state_with_a_key_cut_out_is_refused_naming_the_key(kind: str) -> None:
    """A missing ``config.*`` key reached the constructor as Python's ``missing 1 required
    positional argument``; a missing ``layout.*`` size was detected from the environment."""
    state = _state(kind)
    problems = []
    for key in [k for k in state if k.startswith(("config.", "layout."))]:
        cut = {k: v for k, v in state.items() if k != key}
        try:
            _rebuild(kind, cut)
        except (TypeError, ValueError) as err:
            named = key in str(err) or f"{key.removeprefix('config.')} (" in str(err)  # a label
            if not (isinstance(err, ValueError) and named):
                problems.append(f"without {key}: {type(err).__name__}: {err}")
        else:
            problems.append(f"without {key}: rebuilt")
    assert problems == []


def test_a_missing_extra_key_is_reported_after_the_configuration() -> None:
    """The first difference a user sees is the configuration's: a blend state without a
    schedule loaded into a blend with one said ``state is missing keys ['mixture']``."""
    from dataorder.llm.mixture import MixtureSchedule

    plain = BlendedSampler([20, 30], [1, 1], 2, 0, 2, 8, seed=3)
    scheduled = BlendedSampler([20, 30], MixtureSchedule([(0, [1, 1])]), 2, 0, 2, 8, seed=4)
    with pytest.raises(ValueError, match="seed is 3 in the state but 4 in this sampler"):
        scheduled.load_state_dict(plain.state_dict())
    same = BlendedSampler([20, 30], MixtureSchedule([(0, [1, 1])]), 2, 0, 2, 8, seed=3)
    state = dict(same.state_dict())
    del state["mixture"]
    with pytest.raises(ValueError, match=r"state is missing keys \['mixture'\]"):
        same.load_state_dict(state)


def test_from_state_of_another_kind_says_which_class_rebuilds_it() -> None:
    state = _state("megatron_random")
    with pytest.raises(ValueError) as info:
        PackedSampler.from_state(state, lengths=LENGTHS)
    assert str(info.value) == (
        "state['kind'] must be 'packed'; got state['kind']='megatron_random' (rebuild a "
        "'megatron_random' state with MegatronPretrainingRandomSampler.from_state)"
    )


#: kind -> the constructor's keywords for the data-parallel rank and size.
CONSTRUCTOR_NAMES = {
    "megatron_single": ("data_parallel_rank", "data_parallel_size"),
    "megatron_random": ("data_parallel_rank", "data_parallel_size"),
    "blended": ("data_parallel_rank", "data_parallel_size"),
    "packed": ("data_parallel_rank", "data_parallel_size"),
    "variable_length": ("data_parallel_rank", "data_parallel_size"),
    "distributed": ("rank", "num_replicas"),
    "sequential_bucket": ("rank", "num_replicas"),
}


def _spellings(kind: str, rank: int, size: int) -> list[dict[str, int]]:
    """Every way to say ``(rank, size)`` to ``from_state``: the constructor's keywords, the
    generic ``rank``/``dp_size``, one of each, and both at once with the same values."""
    own_rank, own_size = CONSTRUCTOR_NAMES[kind]
    return [
        {own_rank: rank, own_size: size},
        {"rank": rank, "dp_size": size},
        {own_rank: rank, "dp_size": size},
        {"rank": rank, own_size: size},
        {"rank": rank, own_rank: rank, "dp_size": size, own_size: size},
    ]


def test_the_constructor_names_are_the_constructors() -> None:
    assert set(CONSTRUCTOR_NAMES) == set(KINDS)
    for kind, names in CONSTRUCTOR_NAMES.items():
        cls = SAMPLERS[kind]
        assert (cls.schema.layout.rank, cls.schema.layout.size) == names
        assert set(names) <= set(inspect.signature(cls.__init__).parameters)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("rank", "size"), [(1, 2), (0, 1)])
def test_from_state_takes_the_constructors_rank_and_size_keywords(
    kind: str, rank: int, size: int
) -> None:
    """The state was saved on 2 ranks; ``(0, 1)`` is an elastic resume on one."""
    state = _state(kind)
    made = KINDS[kind][0](rank, size)
    made.load_state_dict(state)
    expected = (made.state_dict(), next(iter(made)))
    for kw in _spellings(kind, rank, size):
        again = _rebuild(kind, state, **kw)
        assert (again.dp_rank, again.epoch_plan(0).dp_size) == (rank, size), kw
        assert (again.state_dict(), next(iter(again))) == expected, kw


@pytest.mark.parametrize("kind", list(KINDS))
def test_from_state_refuses_a_rank_or_size_given_twice_with_different_values(kind: str) -> None:
    own_rank, own_size = CONSTRUCTOR_NAMES[kind]
    state = _state(kind)
    clashes = [({"dp_size": 1, own_size: 2}, f"dp_size=1 and {own_size}=2")]
    if own_rank != "rank":
        clashes.append(({"rank": 0, own_rank: 1}, f"rank=0 and {own_rank}=1"))
    clashes.append(({"dp_size": 2, own_size: True}, f"dp_size=2 and {own_size}=True"))
    for kw, named in clashes:
        with pytest.raises(TypeError) as info:
            _rebuild(kind, state, **kw)
        assert named in str(info.value), kw
        assert "give one of them" in str(info.value)


@pytest.mark.parametrize("kind", list(KINDS))
def test_from_state_names_a_bad_rank_or_size_by_the_keyword_given(kind: str) -> None:
    own_rank, own_size = CONSTRUCTOR_NAMES[kind]
    state = _state(kind)
    for kw, exc, message in [
        ({own_size: 0}, ValueError, f"{own_size} must be a positive int; got {own_size}=0"),
        ({own_rank: -1}, ValueError, f"{own_rank} must be a non-negative int; got {own_rank}=-1"),
        ({own_rank: "1"}, TypeError, f"{own_rank} must be a non-negative int; got {own_rank}='1'"),
    ]:
        with pytest.raises(exc) as info:
            _rebuild(kind, state, **kw)
        assert message in str(info.value), kw


@pytest.mark.parametrize("kind", list(KINDS))
def test_from_state_lists_the_constructors_keywords_for_an_unknown_one(kind: str) -> None:
    own_rank, own_size = CONSTRUCTOR_NAMES[kind]
    with pytest.raises(TypeError) as info:
        _rebuild(kind, _state(kind), world_size=2)
    message = str(info.value)
    assert f"from_state() takes {own_rank}, {own_size}, " in message
    assert "dp_size" in message
    assert "unexpected keyword 'world_size'" in message
