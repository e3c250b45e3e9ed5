"""The partition checks, pure: what :func:`~dataorder.parallel.verify.verify_data_parallel`
runs on every rank after the gather, and :func:`check_items` runs on items already in one place.

Every check takes the items of each data-parallel rank (indices, ``None`` for a padding slot, or
batches of them; or any items, read through their sampler's batching rule: NOTE [ Coverage ] in
:mod:`dataorder.core.batching`) and returns its violations, one line each, so that every rank of
a job reaches the same verdict from the same gathered data.

Example:
    >>> check_items([[[0, 1], [4]], [[2, 3], [5]]], allowed_padding=0, full=True)
    []
    >>> problems = check_items([[[0, 1]], [[1, 2]]], allowed_padding=0)
    >>> problems[0].split(": ")[-1]
    'DP ranks 0 and 1 share 1 samples, e.g. [1]'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.batching import BATCHES, INDICES, BatchRule, Spans, coverage, read_spans

__all__ = ["check_items"]

NO_PADDING_CHECK = -1  # allowed_padding=None in check_items: no declaration to compare
_MAX_EXAMPLES = 5

IntArray = npt.NDArray[np.int64]


def infer_rule(items: Sequence[Any]) -> BatchRule:
    """The sample rule of items that are indices, ``None`` or batches of them (a source that
    declares no batching rule: a plain DataLoader, torch's samplers)."""
    kinds = set()
    for item in items:
        value = item.tolist() if hasattr(item, "tolist") else item
        kinds.add(value is None or isinstance(value, int | np.integer))
        if len(kinds) > 1:
            raise TypeError("items mix single indices and batches")
    return INDICES if kinds == {True} else BATCHES


def read_items(items: Iterable[Any], rule: BatchRule | None = None) -> dict[str, Any]:
    """What ``items`` cover, through ``rule`` (default: inferred from the items, which are then
    indices, ``None`` or batches of them): ``{"batched", "unit", "keys", "starts", "stops",
    "padding", "sizes", "head"}`` (NOTE [ Coverage ] in :mod:`dataorder.core.batching`)."""
    items = list(items)
    if rule is None:
        rule = infer_rule(items)
    read = read_spans(rule, items)
    k, a, b = read.spans
    negative = k[k < 0]
    if negative.size:
        what = "indices" if rule.unit == "sample" else "documents"
        raise ValueError(
            f"{what} must be non-negative ints or None; got {negative[:_MAX_EXAMPLES].tolist()}"
        )
    if rule.batched:
        head = list(rule.slots(items[0]))[:16] if items else []
    else:
        head = [slot for item in items[:4] for slot in rule.slots(item)]
    return {
        "batched": rule.batched,
        "unit": rule.unit,
        "keys": k,
        "starts": a,
        "stops": b,
        "padding": read.padding,
        "sizes": np.array(read.sizes, dtype=np.int64),
        "head": head,
    }


def spans_of(payloads: Sequence[Mapping[str, Any]]) -> Spans:
    """Every span the payloads cover, concatenated."""
    if not payloads:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return (
        np.concatenate([p["keys"] for p in payloads]),
        np.concatenate([p["starts"] for p in payloads]),
        np.concatenate([p["stops"] for p in payloads]),
    )


def digest(payload: Mapping[str, Any]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in ("sizes", "keys", "starts", "stops"):
        h.update(payload[name].tobytes())
    h.update(str(payload["padding"]).encode())
    return h.hexdigest()


def check_dp(payloads: Sequence[Mapping[str, Any]], allowed_override: int | None) -> list[str]:
    """Violations of lock-step and disjointness among the DP ranks (ordered by DP rank)."""
    out: list[str] = []
    size = len(payloads)
    for p in payloads:
        out += [f"DP rank {p['dp_rank']}: {e}" for e in p["errors"]]
    if out:
        return out
    out += _declared_ranks(payloads)
    kinds = {p["batched"] for p in payloads}
    if len(kinds) > 1:
        out.append("some DP ranks yield batches and others single indices")
    counts = [len(p["sizes"]) for p in payloads]
    if len(set(counts)) > 1:
        out.append(
            "DP ranks have different numbers of batches (a collective hangs at the end): "
            + ", ".join(f"rank {p['dp_rank']}: {c}" for p, c in zip(payloads, counts, strict=True))
        )
    common = min(counts) if counts else 0
    if common and size > 1:
        table = np.stack([p["sizes"][:common] for p in payloads])
        uneven = np.flatnonzero((table != table[0]).any(axis=0))
        if uneven.size:
            step = int(uneven[0])
            out.append(
                f"DP ranks' batch sizes differ at {uneven.size} steps, first at step {step}: "
                f"{table[:, step].tolist()}"
            )
    if allowed_override != NO_PADDING_CHECK:
        out += _padding(payloads, allowed_override)
    return out


def _declared_ranks(payloads: Sequence[Mapping[str, Any]]) -> list[str]:
    """Whether the samplers declare this group's size and one rank each (when all declare)."""
    out: list[str] = []
    size = len(payloads)
    declared = [p["declared"] for p in payloads]
    if all(d is not None for d in declared):
        sizes = sorted({d[1] for d in declared})
        ranks = sorted(d[0] for d in declared)
        if sizes != [size]:
            out.append(
                f"the samplers declare num_replicas {sizes} but the data-parallel group has "
                f"{size} ranks (with tensor or context parallelism, build the sampler with "
                "the data-parallel size, e.g. mesh=)"
            )
        elif ranks != list(range(size)):
            out.append(
                "the samplers declare ranks "
                f"{[d[0] for d in declared]} on DP ranks {list(range(size))}: each must "
                "take a different data-parallel rank"
            )
    return out


def _padding(payloads: Sequence[Mapping[str, Any]], allowed_override: int | None) -> list[str]:
    """Whether the padding over the DP ranks is what the samplers (or the caller) declare."""
    out: list[str] = []
    allowed_values = {p["allowed"] for p in payloads}
    if allowed_override is not None:
        allowed = allowed_override
    elif len(allowed_values) == 1:
        allowed = next(iter(allowed_values)) or 0
    else:
        counter = f"{payloads[0]['unit']}s_padded"  # the rule's padded counter
        out.append(f"DP ranks declare different {counter} {sorted(allowed_values, key=str)}")
        return out
    padding = padding_units(payloads)
    full = all(p["full"] for p in payloads)
    if padding > allowed or (full and padding != allowed):
        unit = payloads[0]["unit"] if payloads else "sample"
        what = "slots (repeated samples or None)" if unit == "sample" else f"{unit}s"
        out.append(
            f"{padding} padding {what} over the DP ranks but the sampler declares {allowed}"
            + (" for the whole epoch" if full else " at most")
            + _overlap_detail(payloads)
        )
    return out


def padding_units(payloads: Sequence[Mapping[str, Any]]) -> int:
    """Padding over the payloads: units covered more than once, plus padding units."""
    return coverage(spans_of(payloads)).repeated + sum(int(p["padding"]) for p in payloads)


def _shared(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, list[Any]]:
    """Units two payloads both cover (each counted once), and a few examples."""
    one, two = coverage(spans_of([a])), coverage(spans_of([b]))
    both = coverage(spans_of([a, b]))
    count = one.distinct + two.distinct - both.distinct
    if not count:
        return 0, []
    if a["unit"] == "sample":
        common = np.intersect1d(a["keys"], b["keys"])
        return count, common[:_MAX_EXAMPLES].tolist()
    examples = []
    theirs: dict[int, list[tuple[int, int]]] = {}
    for k, x, y in zip(b["keys"].tolist(), b["starts"].tolist(), b["stops"].tolist(), strict=True):
        theirs.setdefault(k, []).append((x, y))
    for k, x, y in zip(a["keys"].tolist(), a["starts"].tolist(), a["stops"].tolist(), strict=True):
        for u, v in theirs.get(k, ()):
            if max(x, u) < min(y, v):
                examples.append((k, max(x, u), min(y, v)))
        if len(examples) >= _MAX_EXAMPLES:
            break
    return count, examples[:_MAX_EXAMPLES]


def _overlap_detail(payloads: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for p in payloads:
        repeated = coverage(spans_of([p])).repeated
        if repeated:
            parts.append(f"DP rank {p['dp_rank']} repeats {repeated} of its own {p['unit']}s")
    for a in range(len(payloads)):
        for b in range(a + 1, len(payloads)):
            count, examples = _shared(payloads[a], payloads[b])
            if count:
                ranks = f"DP ranks {payloads[a]['dp_rank']} and {payloads[b]['dp_rank']}"
                parts.append(f"{ranks} share {count} {payloads[a]['unit']}s, e.g. {examples}")
            if len(parts) >= 2 * _MAX_EXAMPLES:
                return ": " + "; ".join(parts) + "; ..."
    return (": " + "; ".join(parts)) if parts else ""


def check_replicas(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Violations among replicas (same DP rank): they must have read identical items."""
    if any(e["failed"] for e in entries):
        return []  # a rank that could not read its items is reported by its DP group
    versions: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        versions.setdefault(e["digest"], []).append(e)
    if len(versions) <= 1:
        return []
    detail = "; ".join(
        f"replica ranks {[e['replica_rank'] for e in group]} (DP ranks "
        f"{sorted({e['dp_rank'] for e in group})}) read {group[0]['count']} items starting "
        f"{group[0]['head']}"
        for group in versions.values()
    )
    return [
        f"ranks that must read identical data (tensor/context-parallel replicas) read "
        f"{len(versions)} different versions: {detail}"
    ]


def head(payload: Mapping[str, Any]) -> list[Any]:
    """The first items' slots, for a message."""
    return [payload["head"]] if payload["batched"] else list(payload["head"])


def check_items(
    items_by_dp_rank: Sequence[Iterable[Any]],
    *,
    allowed_padding: int | None = None,
    full: bool = False,
    replicas: Sequence[Sequence[Iterable[Any]]] = (),
    batching: BatchRule | None = None,
) -> list[str]:
    """The checks of :func:`verify_data_parallel`, on items already in one place.

    No collective: for a job's records gathered after the fact (the demo checks what every
    process trained on this way), or a test that simulates the ranks.

    Args:
        items_by_dp_rank: Each DP rank's items (indices, ``None``, or batches of them), in DP
            rank order. Empty to check only ``replicas``.
        allowed_padding: Padding slots (repeats or ``None``) the sampler declares; None skips
            the count (only the lock-step checks run).
        full: Whether the items are a whole epoch (then the padding must equal the declaration).
        replicas: Per DP rank, in DP rank order, the items of each process that must read
            identical data (its tensor/context-parallel replicas).
        batching: How to read an item (the sampler's ``batching`` rule, e.g. packed rows);
            default: indices, ``None`` or batches of them.

    Returns:
        The violations, one line each (empty if the partition is correct).
    """
    if isinstance(items_by_dp_rank, str | bytes) or not isinstance(items_by_dp_rank, Sequence):
        fail(
            "items_by_dp_rank",
            "a sequence of each DP rank's items",
            items_by_dp_rank,
            TypeError,
        )
    if allowed_padding is not None:
        allowed_padding = check_int("allowed_padding", allowed_padding, min_value=0)
    full = check_bool("full", full)
    payloads = []
    for r, items in enumerate(items_by_dp_rank):
        payload: dict[str, Any] = {"dp_rank": r, "declared": None, "allowed": None, "errors": []}
        payload.update(read_items(items, batching), full=full)
        payloads.append(payload)
    out = (
        check_dp(payloads, NO_PADDING_CHECK if allowed_padding is None else allowed_padding)
        if payloads
        else []
    )
    for dp_rank, group in enumerate(replicas):
        out += check_replicas(_replica_entries(dp_rank, group, batching))
    return out


def _replica_entries(
    dp_rank: int, group: Sequence[Iterable[Any]], batching: BatchRule | None
) -> list[dict[str, Any]]:
    """What :func:`check_replicas` compares, for the replicas of one DP rank."""
    entries = []
    for i, items in enumerate(group):
        slots = {**read_items(items, batching), "errors": []}
        entries.append(
            {
                "dp_rank": dp_rank,
                "replica_rank": i,
                "digest": digest(slots),
                "count": len(slots["sizes"]),
                "head": head(slots),
                "failed": False,
            }
        )
    return entries
