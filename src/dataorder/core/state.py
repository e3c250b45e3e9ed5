"""The checkpoint format of every dataorder sampler: a flat, versioned dict of ints and strings.

A state records *global* progress (the epoch and how far the whole job has got in it), never a
rank's progress and never RNG bytes; a rank's slice is derived from it. It also records the
configuration that determines the order, and a fingerprint of that configuration, so a state from
another dataset, seed or mode is refused with the name of the field that differs. Layout fields
(data-parallel size, micro-batch size: sizes, so positive ints) are recorded for inspection;
samplers that resume elastically do not require them to match.

Example (a Megatron random sampler's state, 8 ranks, after 3 global blocks of 16)::

    {"format": "dataorder.state", "version": 1, "kind": "megatron_random",
     "fingerprint": "5d0c...", "epoch": 0, "consumed": 48,
     "config.total_samples": 1000, "config.seed": 0, ..., "layout.data_parallel_size": 8}

The state is at most :data:`MAX_STATE_BYTES` (576) bytes of compact JSON whatever the dataset
size (NOTE [ State size ]), survives ``json.dumps`` and ``pickle``, and :func:`parse_state` never
mutates its argument.

NOTE [ State size ]
    A state holds a fixed set of keys per sampler and mode, short digests, and ints whose caps
    are documented where they enter: seeds below ``2**63`` (``MAX_SEED``), epochs below
    ``2**32`` (:data:`MAX_EPOCH`), sample counts and positions at most ``2**62``, batch and
    data-parallel sizes at most ``2**31``, an interleave unit at most ``2**16``. Every state
    with every field at its cap at once fits in 576 bytes of compact JSON
    (``json.dumps(state, separators=(",", ":"))``; the default separators add two bytes per
    key). The largest are the bucket sampler's (NeMo-compatible mode 555 bytes, the
    interleaved order 540, sequential 522: a bucket index and a position of 19 digits each),
    then Megatron's random sampler with ``data_sharding=True`` (530, at the largest epoch with
    ``total_samples = global_batch_size = 2**62`` and ``2**31`` ranks of ``2**31``), and the
    blend (under 520 with a 19-digit count of schedule entries). 512 bytes, the bound of
    0.2.0's drafts, does not hold: the interleaved order reached 513 bytes on a dataset that
    fits in memory (a 16.8 M-sample bucket among 120 k buckets at the largest epoch).
    ``tests/test_hostile_states.py`` builds every sampler and mode at these extremes. The
    packed sampler writes its packing in one field (NOTE [ Packed state fields ] in
    :mod:`dataorder.llm.packing.sampler`): one corpus at most 459 bytes, a blend of packed
    sources with a batch-size schedule 546. The one exception is
    :class:`~dataorder.llm.vsl.VariableLengthSampler`, whose position is one count per chunk
    length: within 576 bytes up to four lengths, 32 bytes more per further length (its
    ``max_state_bytes``; NOTE [ VSL state size ] in :mod:`dataorder.llm.vsl`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol

__all__ = [
    "MAX_EPOCH",
    "MAX_STATE_BYTES",
    "STATE_FORMAT",
    "STATE_VERSION",
    "Scalar",
    "StateKey",
    "build_state",
    "check_extras",
    "config_fingerprint",
    "digest",
    "extra_values",
    "find_sampler_states",
    "parse_state",
    "split_state",
    "without_repeated_layout",
]

STATE_FORMAT = "dataorder.state"
STATE_VERSION = 1

#: Largest epoch a sampler counts to (about four billion): with it every state, at the largest
#: legal values of every field, stays within MAX_STATE_BYTES (NOTE [ State size ]).
MAX_EPOCH = 2**32 - 1

#: Largest state any sampler writes, in bytes of compact JSON, at the largest legal value of
#: every field at once (NOTE [ State size ]).
MAX_STATE_BYTES = 576

Scalar = int | str
_HEADER = ("format", "version", "kind", "fingerprint", "epoch")


def _check_scalar(name: str, value: object) -> Scalar:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | str):
        return value
    raise TypeError(f"{name} must be an int or str; got {name}={value!r}")


def digest(payload: object) -> str:
    """16 hex digits of BLAKE2b over ``payload`` as compact JSON: what a state records of a
    value too large to hold (a list of sizes, a schedule, the fingerprints of sources).

    Example:
        >>> digest([10, 20])
        '6414a95eef5c43a8'
    """
    text = json.dumps(payload, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


class StateKey(Protocol):
    """A key a sampler's state adds beside the cursor's (:class:`dataorder.core.schema.Extra`
    declares one)."""

    @property
    def name(self) -> str:
        """The state key."""
        ...

    def save(self, sampler: Any, epoch: int, progress: Mapping[str, int], /) -> Scalar | None:
        """Its value at ``(epoch, progress)``; None leaves it out of the state."""
        ...

    def check(
        self,
        sampler: Any,
        value: object,
        epoch: int,
        progress: Mapping[str, int],
        layout: Mapping[str, int],
        /,
    ) -> None:
        """Refuse a saved ``value`` (ValueError naming ``state[name]``)."""
        ...

    def needed(self, sampler: Any) -> bool:
        """Whether ``sampler`` refuses a state without it."""
        ...


def extra_values(
    keys: Sequence[StateKey], sampler: Any, epoch: int, progress: Mapping[str, int]
) -> dict[str, Scalar]:
    """``{name: value}`` of ``keys`` with ``sampler``'s cursor at ``(epoch, progress)``, less
    those whose value is None (left out of the state)."""
    values = ((k.name, k.save(sampler, epoch, progress)) for k in keys)
    return {name: value for name, value in values if value is not None}


def check_extras(
    keys: Sequence[StateKey],
    saved: Mapping[str, object],
    sampler: Any,
    epoch: int,
    progress: Mapping[str, int],
    state: Mapping[str, Any],
) -> None:
    """Refuse a state whose ``saved`` extra keys are missing or wrong at ``(epoch, progress)``,
    after the rest of ``state`` was checked (its ``layout.*`` fields are ints then).

    Raises:
        ValueError: Naming the missing keys, or the key that is wrong.
    """
    missing = [k.name for k in keys if k.name not in saved and k.needed(sampler)]
    if missing:
        raise ValueError(f"state is missing keys {missing}")
    if saved:
        layout = {k[7:]: int(v) for k, v in state.items() if k.startswith("layout.")}
        for key in keys:
            if key.name in saved:
                key.check(sampler, saved[key.name], epoch, progress, layout)


def without_repeated_layout(state: Mapping[Any, Any], names: Sequence[str]) -> dict[Any, Any]:
    """A copy of ``state`` without the ``layout.<name>`` fields its configuration records too
    (states of an order that bakes the layout in once repeated them); never mutated.

    Raises:
        ValueError: If a repeated field differs from the configuration's (an edited state).
    """
    out = dict(state)
    for name in names:
        key = f"layout.{name}"
        if key in out and f"config.{name}" in out:
            if out[key] != out[f"config.{name}"]:
                raise ValueError(
                    f"state[{key!r}] must equal state['config.{name}']; got {out[key]!r} and "
                    f"{out[f'config.{name}']!r} (an edited state)"
                )
            del out[key]
    return out


def config_fingerprint(config: Mapping[str, Scalar]) -> str:
    """Return a 16-hex-digit digest of ``config`` (order of keys does not matter)."""
    return digest(sorted(config.items()))


def build_state(
    kind: str,
    *,
    epoch: int,
    config: Mapping[str, object],
    progress: Mapping[str, int],
    layout: Mapping[str, int] | None = None,
    extras: Mapping[str, Scalar] | None = None,
    trailer: Mapping[str, Scalar] | None = None,
) -> dict[str, Scalar]:
    """Assemble a state dict.

    Args:
        kind: The sampler kind, e.g. ``"megatron_random"``.
        epoch: The current epoch.
        config: Fields that determine the order (bools are stored as 0/1).
        progress: Global progress counters in the epoch, e.g. ``{"consumed": 48}``.
        layout: Informational layout fields, sizes such as ``{"data_parallel_size": 8}``
            (:func:`parse_state` refuses a size below 1).
        extras: A sampler's own keys beside the progress, written right after it.
        trailer: Keys written last (a compat order's, such as torchdata's ``yielded``).
    """
    cfg = {k: _check_scalar(f"config.{k}", v) for k, v in config.items()}
    state: dict[str, Scalar] = {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "kind": kind,
        "fingerprint": config_fingerprint(cfg),
        "epoch": int(epoch),
    }
    state.update({k: int(v) for k, v in progress.items()})
    state.update(extras or {})
    state.update({f"config.{k}": v for k, v in cfg.items()})
    state.update({f"layout.{k}": int(v) for k, v in (layout or {}).items()})
    state.update(trailer or {})
    return state


def _state_int(
    state: Mapping[str, object], key: str, min_value: int = 0, max_value: int | None = None
) -> int:
    value = state[key]
    bad = isinstance(value, bool) or not isinstance(value, int) or value < min_value
    if bad or (max_value is not None and value > max_value):  # type: ignore[operator]
        if max_value is not None:
            what = f"an int in [{min_value}, {max_value}]"
        else:
            what = "a positive int" if min_value == 1 else "a non-negative int"
        raise ValueError(f"state[{key!r}] must be {what}; got {key}={value!r}")
    return value  # type: ignore[return-value]


def parse_state(
    state: object,
    *,
    kind: str,
    config: Mapping[str, object],
    progress_keys: Sequence[str],
    layout_keys: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, int], dict[str, int]]:
    """Validate ``state`` against a sampler's configuration and return its progress.

    Strict: unknown or missing keys, another format, version or kind, a configuration field that
    differs, or a fingerprint that does not match the recorded configuration are all refused.
    A field that differs is named by its key, or by ``labels[key]`` where the key is not the
    argument's name (the bucket sampler records ``interleave_unit`` as ``interleaved``); a
    labelled field set on one side only is reported as such, before unknown or missing keys.

    Returns:
        ``(epoch, progress, layout)``: the epoch, the progress counters, and the recorded layout.

    Raises:
        TypeError: If ``state`` is not a mapping.
        ValueError: If the state cannot be read or belongs to another configuration; the message
            names the offending key and both values.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state_dict must be a dict; got {type(state).__name__}")
    _check_header(state, kind)
    cfg = {k: _check_scalar(f"config.{k}", v) for k, v in config.items()}
    expected = (
        set(_HEADER)
        | set(progress_keys)
        | {f"config.{k}" for k in cfg}
        | {f"layout.{k}" for k in layout_keys}
    )
    _check_fields(state, cfg, labels or {})
    present = set(state)
    if present - expected:  # sorted by repr: an edited state may mix str keys with others
        raise ValueError(f"state has unknown keys {sorted(present - expected, key=repr)}")
    if expected - present:
        raise ValueError(f"state is missing keys {sorted(expected - present)}")
    if state["fingerprint"] != config_fingerprint(cfg):
        _refuse_fingerprint(state, cfg, labels or {})
    epoch = _state_int(state, "epoch", max_value=MAX_EPOCH)
    progress = {k: _state_int(state, k) for k in progress_keys}
    layout = {k: _state_int(state, f"layout.{k}", min_value=1) for k in layout_keys}  # sizes
    return epoch, progress, layout


def _check_header(state: Mapping[Any, Any], kind: str) -> None:
    """Refuse a state of another format, version or sampler kind."""
    if state.get("format") != STATE_FORMAT:
        raise ValueError(
            f"not a dataorder sampler state: state['format'] is {state.get('format')!r}, "
            f"expected {STATE_FORMAT!r}"
        )
    version = state.get("version")
    if type(version) is not int or version != STATE_VERSION:  # True == 1 and 1.0 == 1: refused
        raise ValueError(
            f"state version {version!r} is not supported; this dataorder reads "
            f"version {STATE_VERSION}"
        )
    if state.get("kind") != kind:
        raise ValueError(f"state is from a {state.get('kind')!r} sampler, not a {kind!r} sampler")


def _check_fields(
    state: Mapping[Any, Any], cfg: Mapping[str, object], labels: Mapping[str, str]
) -> None:
    """Refuse a state whose configuration field differs from ours, or whose labelled field is
    set on one side only (named by its label)."""
    # A configuration field both sides have but with another value is the most telling
    # difference (another order has other fields too): report it before missing keys.
    for key, ours in cfg.items():
        name = f"config.{key}"
        if name not in state:
            continue
        theirs = state[name]
        if type(theirs) is not type(ours) or theirs != ours:
            raise ValueError(
                f"state is from another configuration: {labels.get(key, key)} is "
                f"{theirs!r} in the state but {ours!r} in this sampler"
            )
    for key, label in labels.items():
        name = f"config.{key}"
        if (key in cfg) != (name in state):
            theirs_text = f"{state[name]!r} in the state" if name in state else "not in the state"
            ours_text = f"{cfg[key]!r} in this sampler" if key in cfg else "not set here"
            raise ValueError(
                f"state is from another configuration: {label} is {theirs_text} but {ours_text}"
            )


def _refuse_fingerprint(
    state: Mapping[Any, Any], cfg: Mapping[str, object], labels: Mapping[str, str]
) -> NoReturn:
    """Explain a fingerprint that does not match its configuration fields."""
    # Every field both sides record agrees, so the state's configuration had a field this
    # sampler does not record, and it is gone: torch.distributed.checkpoint loads only the
    # keys of the loading sampler's own state (its template) and drops the others. A
    # labelled field this configuration leaves out is the one that can vanish that way.
    dropped = [
        label for key, label in labels.items() if key not in cfg and f"config.{key}" not in state
    ]
    if dropped:
        raise ValueError(
            "state is from another configuration: "
            + " or ".join(dropped)
            + " is not set here, and the state's fingerprint says its configuration set it "
            "(every field both record agrees): its key was dropped before the state got "
            "here, as torch.distributed.checkpoint drops the keys the loading sampler's own "
            "state lacks (or the state was edited); build the sampler as the saved run did"
        )
    raise ValueError(
        "state fingerprint does not match its configuration fields: the state was edited "
        "or written by an incompatible dataorder"
    )


def split_state(
    state: Mapping[str, object],
) -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
    """``(config, layout, progress)`` of a state, without the ``config.``/``layout.`` prefixes.

    No validation: this reads a state for display or to rebuild its sampler, whose
    ``load_state_dict`` then checks it.
    """
    config = {k[7:]: v for k, v in state.items() if isinstance(k, str) and k.startswith("config.")}
    layout = {k[7:]: v for k, v in state.items() if isinstance(k, str) and k.startswith("layout.")}
    progress = {
        k: v
        for k, v in state.items()
        if k not in _HEADER and not (isinstance(k, str) and k.startswith(("config.", "layout.")))
    }
    return config, layout, progress


def find_sampler_states(value: object, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every dataorder sampler state inside ``value``, with where it was found.

    ``value`` is a sampler's ``state_dict()`` or anything that holds one, e.g. a torchdata
    ``StatefulDataLoader`` state (under ``_index_sampler_state`` for a ``batch_sampler``, or
    ``_sampler_iter_state.sampler_state`` for a ``sampler``) or a whole training checkpoint.
    The walk keeps its own stack, not Python's: a document nested as deep as memory allows (a
    hostile JSON file) is searched without a ``RecursionError``.

    Returns:
        ``(path, state)`` pairs, ``path`` like ``"_index_sampler_state"``, in document order.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    stack: list[tuple[str, object]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        children: list[tuple[str, object]]
        if isinstance(item, dict):
            if item.get("format") == STATE_FORMAT:
                found.append((path or "(top level)", item))
                continue
            children = [(f"{path}.{k}" if path else str(k), v) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(f"{path}[{i}]", v) for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))  # popped first to last: document order
    return found
