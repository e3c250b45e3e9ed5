"""Key derivation: structured, deterministic, and free of seed+epoch collisions."""

from __future__ import annotations

import itertools

import pytest

from dataorder.core.keys import derive_key


def test_golden_keys() -> None:
    assert derive_key(0, epoch=0, stream="s", purpose="p") == 2460410515007014111
    assert derive_key(1234, epoch=3, stream="megatron", purpose="sample-order") == (
        8050826908299430355
    )


def test_no_seed_plus_epoch_collisions() -> None:
    keys = {
        derive_key(s, epoch=e, stream="x", purpose="y")
        for s, e in itertools.product(range(50), range(50))
    }
    assert len(keys) == 2500


def test_every_field_matters() -> None:
    base = {"epoch": 1, "stream": "a", "purpose": "b", "extra": (1,)}
    k = derive_key(5, **base)  # type: ignore[arg-type]
    assert derive_key(6, **base) != k  # type: ignore[arg-type]
    for field, value in [("epoch", 2), ("stream", "a2"), ("purpose", "c"), ("extra", (2,))]:
        assert derive_key(5, **{**base, field: value}) != k  # type: ignore[arg-type]
    # no ambiguity between fields
    assert derive_key(5, epoch=1, stream="ab", purpose="") != derive_key(
        5, epoch=1, stream="a", purpose="b"
    )


def test_large_seeds_are_fine() -> None:
    assert derive_key(2**200, epoch=0, stream="s", purpose="p") != derive_key(
        2**200 + 1, epoch=0, stream="s", purpose="p"
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"seed": -1}, ValueError, "seed must be a non-negative int; got seed=-1"),
        ({"seed": True}, TypeError, "seed must be a non-negative int; got seed=True"),
        ({"epoch": -2}, ValueError, "epoch must be a non-negative int; got epoch=-2"),
        ({"stream": 3}, TypeError, "stream must be a str; got stream=3"),
        ({"purpose": None}, TypeError, "purpose must be a str; got purpose=None"),
        ({"extra": (-1,)}, ValueError, "extra must be a non-negative int; got extra=-1"),
    ],
)
def test_bad_input(kwargs: dict[str, object], exc: type[Exception], match: str) -> None:
    args: dict[str, object] = {"seed": 1, "epoch": 0, "stream": "s", "purpose": "p", **kwargs}
    with pytest.raises(exc, match=match):
        derive_key(**args)  # type: ignore[arg-type]
