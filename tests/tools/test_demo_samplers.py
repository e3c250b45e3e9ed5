"""The demo's registry of samplers: each entry builds for any rank, the checks and the commands
it names exist, and the demo's other parts follow it (no process is started here)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dataorder.core.batching import BATCHES
from dataorder.tools.demo import inspect_commands, write_inspect_files
from dataorder.tools.demo_checks import EXTRA_CHECKS
from dataorder.tools.demo_config import SAMPLERS, DemoConfig
from dataorder.tools.demo_data import (
    DOCUMENT_LENGTHS,
    PACKED_SEQ_LEN,
    PackedTokens,
    load_documents,
    load_tokens,
    packed_model,
)
from dataorder.tools.demo_job import PRELOAD, preload
from dataorder.tools.demo_samplers import DEMO_SAMPLERS, PackedDocuments, Placement

CONFIG = DemoConfig()


def test_the_samplers_are_the_registry() -> None:
    assert tuple(DEMO_SAMPLERS) == SAMPLERS
    assert [e.name for e in DEMO_SAMPLERS.values()] == list(SAMPLERS)
    for entry in DEMO_SAMPLERS.values():
        assert set(entry.checks) <= set(EXTRA_CHECKS), entry.name
    names = preload(SAMPLERS)
    assert names[: len(PRELOAD)] == list(PRELOAD)
    for module in names:
        assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize(
    "where",
    [Placement(1, 2), Placement(7, 8)],  # a DP rank of the job; the injected bug's global world
    ids=["dp", "global-world"],
)
def test_every_entry_builds_for_a_rank(name: str, where: Placement) -> None:
    entry = DEMO_SAMPLERS[name]
    data = entry.data(CONFIG)
    sampler = entry.build(data, where, CONFIG)
    assert (sampler.topology.dp_rank, sampler.topology.dp_size) == (where.rank, where.size)
    first = next(iter(sampler))
    items = first if sampler.batching.batched else [first]  # what the loader batches
    # what a process records is read with the rule of what it trains on (build_job checks it)
    rule = entry.reading.batching
    assert rule == (sampler.batching if sampler.batching.batched else BATCHES)
    keys, starts, stops = rule.spans(rule.slots(items))
    assert keys.size
    assert int(keys.min()) >= 0
    assert int((stops - starts).sum()) <= entry.reading.universe(data)
    model, loss_fn = entry.model(0)
    batch = (entry.reading.collate or _collate)([data.dataset[i] for i in items])
    assert math.isfinite(float(loss_fn(model, batch).detach()))
    # the record of a trained batch is the item the sampler yielded, as JSON keeps it
    assert _as_json(entry.reading.item(batch)) == _as_json(items)
    if entry.notes is not None:
        assert all(isinstance(line, str) for line in entry.notes(data, sampler, CONFIG))


def _collate(samples: list[dict[str, object]]) -> dict[str, object]:
    import torch

    return {k: torch.stack([torch.as_tensor(s[k]) for s in samples]) for k in samples[0]}


def _as_json(value: object) -> object:
    return json.loads(json.dumps(value))


def test_the_documents_are_the_shipped_tokens_cut_in_varied_lengths() -> None:
    docs = load_documents()
    tokens = load_tokens()
    assert int(docs.lengths.sum()) == tokens.size
    assert np.array_equal(np.concatenate([docs.document(d) for d in range(len(docs))]),
                          tokens.reshape(-1))  # fmt: skip
    low, high = DOCUMENT_LENGTHS
    assert int(docs.lengths.min()) >= low
    assert int(docs.lengths.max()) <= high
    assert int((docs.lengths > PACKED_SEQ_LEN).sum()) > 50  # documents longer than a row
    assert np.array_equal(docs.lengths, load_documents().lengths)  # a pure function
    # the window is small enough that the demo's documents span several
    sampler = DEMO_SAMPLERS["packed"].build(PackedDocuments.load(CONFIG), Placement(0, 4), CONFIG)
    assert sampler.plans[0].num_windows > 4
    assert sampler.documents_split > 0


def test_the_packed_model_keeps_attention_inside_documents() -> None:
    import torch

    docs = load_documents()
    data = PackedTokens(docs, PACKED_SEQ_LEN)
    model, _ = packed_model(0)
    # three documents of 3 to 10 tokens: any two fit one row together
    a, b, c = [d for d in range(len(docs)) if 3 <= docs.lengths[d] <= 10][:3]

    def logits(row: tuple[tuple[int, int, int], ...]) -> torch.Tensor:
        batch = data.collate([data[row]])
        with torch.no_grad():
            out: torch.Tensor = model(batch)[0]
        return out

    span = {d: (d, 0, int(docs.lengths[d])) for d in (a, b, c)}
    n_a, n_b = span[a][2], span[b][2]
    alone = logits((span[b],))[:n_b]
    # positions restart at every document and no token sees another document: document b
    # predicts the same after a, or after c, as alone at the start of a row
    assert torch.allclose(logits((span[a], span[b]))[n_a : n_a + n_b], alone, atol=1e-6)
    assert torch.allclose(logits((span[c], span[b]))[span[c][2] : span[c][2] + n_b], alone,
                          atol=1e-6)  # fmt: skip
    # and the model does see its own document: b's tokens change what b predicts next
    other = logits(((b, 1, n_b),))[: n_b - 1]
    assert not torch.allclose(other, alone[1:], atol=1e-6)


def test_placement_keywords_follow_the_sampler_schema() -> None:
    from dataorder.llm.blend import BlendedSampler
    from dataorder.parallel.distributed import DistributedSampler

    where = Placement(3, 8)
    assert where.keywords(BlendedSampler) == {"data_parallel_rank": 3, "data_parallel_size": 8}
    assert where.keywords(DistributedSampler) == {"rank": 3, "num_replicas": 8}
    mesh = object()
    assert Placement(0, 2, mesh).keywords(DistributedSampler) == {"mesh": mesh, "dp_dims": ("dp",)}
    # more ranks than the global batch holds micro-batches: one micro-batch per rank
    assert Placement(0, 4).global_batch_size(CONFIG) == CONFIG.global_batch_size
    assert Placement(0, 8).global_batch_size(CONFIG) == CONFIG.micro_batch_size * 8


def test_inspect_commands_and_files_follow_the_registry(tmp_path: Path) -> None:
    commands = inspect_commands(CONFIG, tmp_path)
    assert list(commands) == [n for n, e in DEMO_SAMPLERS.items() if e.inspect is not None]
    assert commands["buckets"].endswith(f"--manifest {tmp_path / 'buckets.manifest.tsv'}")
    assert commands["mixture"].endswith(f"--log {tmp_path / 'mixture.mixlog.npz'}")
    assert commands["packed"].endswith(f"--lengths {tmp_path / 'packed.lengths.npy'}")
    assert write_inspect_files(CONFIG, tmp_path) == [
        tmp_path / "mixture.mixlog.npz",
        tmp_path / "packed.lengths.npy",
    ]
    # the lengths the packed state was written over: its fingerprint matches
    from dataorder.llm.packing import DocumentLengths

    written = DocumentLengths.from_file(tmp_path / "packed.lengths.npy")
    assert written.fingerprint() == DocumentLengths(load_documents().lengths).fingerprint()
    only = DemoConfig(samplers=("distributed",))
    assert inspect_commands(only, tmp_path) == {
        "distributed": f"dataorder inspect {tmp_path / 'distributed.json'}"
    }
    assert write_inspect_files(only, tmp_path) == []
