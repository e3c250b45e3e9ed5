"""The state format: flat, versioned, strict, pure."""

from __future__ import annotations

import copy
import json
import re

import pytest

from dataorder.core.state import build_state, config_fingerprint, parse_state, split_state

CONFIG = {"total_samples": 1000, "seed": 3, "mode": "default", "drop_last": True}


def _state() -> dict[str, object]:
    return build_state(  # type: ignore[return-value]
        "demo", epoch=2, config=CONFIG, progress={"consumed": 48}, layout={"world": 8}
    )


def _parse(state: object) -> tuple[int, dict[str, int], dict[str, int]]:
    return parse_state(
        state, kind="demo", config=CONFIG, progress_keys=("consumed",), layout_keys=("world",)
    )


def test_round_trip_and_size() -> None:
    state = _state()
    text = json.dumps(state)
    assert len(text) < 512
    assert state["config.drop_last"] == 1  # bools are stored as ints
    before = copy.deepcopy(state)
    assert _parse(json.loads(text)) == (2, {"consumed": 48}, {"world": 8})
    assert state == before


def test_fingerprint_ignores_key_order() -> None:
    assert config_fingerprint({"a": 1, "b": "x"}) == config_fingerprint({"b": "x", "a": 1})
    assert config_fingerprint({"a": 1}) != config_fingerprint({"a": "1"})


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda s: s.update({"config.seed": 4}), "seed is 4 in the state but 3 in this sampler"),
        (lambda s: s.update({"config.mode": "nemo"}), "mode is 'nemo' in the state but 'default'"),
        (lambda s: s.update({"version": 2}), "state version 2 is not supported"),
        # regression: True == 1 was accepted as version 1; mixed-type keys broke the sort
        (lambda s: s.update({"version": True}), "state version True is not supported"),
        (lambda s: s.update({"version": 1.0}), "state version 1.0 is not supported"),
        (lambda s: s.update({1: "x", "surprise": 2}), r"unknown keys \['surprise', 1\]"),
        (lambda s: s.update({"config.seed": 3.0}), "seed is 3.0 in the state but 3 in this"),
        (lambda s: s.update({"format": "x"}), "not a dataorder sampler state"),
        (lambda s: s.update({"kind": "other"}), "state is from a 'other' sampler, not a 'demo'"),
        (lambda s: s.update({"surprise": 1}), r"unknown keys \['surprise'\]"),
        (lambda s: s.pop("consumed"), r"missing keys \['consumed'\]"),
        (lambda s: s.update({"consumed": -1}), "must be a non-negative int; got consumed=-1"),
        (lambda s: s.update({"epoch": True}), "got epoch=True"),
        (lambda s: s.update({"fingerprint": "0" * 16}), "fingerprint does not match"),
    ],
)
def test_refusals(mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    state = _state()
    mutate(state)
    before = copy.deepcopy(state)
    with pytest.raises(ValueError, match=match):
        _parse(state)
    assert state == before


def test_labels_name_a_field_by_its_argument() -> None:
    """A field whose key is not its argument's name is reported under its label, also when
    only one side has it; other fields keep their keys."""
    labels = {"seed": "seed (the order's key)", "unit": "unit (U)"}

    def parse(state: object, config: dict[str, object]) -> object:
        return parse_state(state, kind="demo", config=config, progress_keys=("consumed",),
                           layout_keys=("world",), labels=labels)  # fmt: skip

    cases = [
        ({**_state(), "config.seed": 4}, CONFIG, "seed (the order's key) is 4 in the state but 3"),
        (_state(), {**CONFIG, "unit": 2}, "unit (U) is not in the state but 2 in this sampler"),
        ({**_state(), "config.unit": 2}, CONFIG, "unit (U) is 2 in the state but not set here"),
        ({**_state(), "config.mode": "x"}, CONFIG, "mode is 'x' in the state but 'default'"),
    ]
    for state, config, match in cases:
        with pytest.raises(ValueError, match=re.escape(match)):
            parse(state, config)
    assert parse(_state(), CONFIG) == (2, {"consumed": 48}, {"world": 8})


def test_not_a_mapping() -> None:
    with pytest.raises(TypeError, match="state_dict must be a dict; got list"):
        _parse([1, 2])


def test_split_state_reads_an_edited_state_with_odd_keys() -> None:
    state = {**_state(), 7: "x"}
    config, layout, progress = split_state(state)
    assert config == CONFIG | {"drop_last": 1}
    assert layout == {"world": 8}
    assert progress == {"consumed": 48, 7: "x"}
