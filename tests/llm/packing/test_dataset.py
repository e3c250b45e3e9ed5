"""PackedDataset: a row into tensors (hand-checked positions, labels, document ids, cu_seqlens),
its token sources (in memory, Megatron .bin, Arrow), collate, a DataLoader over packed rows,
and rows that do not match the source refused naming the row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.llm.packing.dataset import IGNORE_INDEX, PackedDataset
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.megatron_files import write_megatron
from dataorder.llm.packing.plan import PackingPlan

torch = pytest.importorskip("torch")

DOCS = [[10, 11, 12], [20, 21, 22, 23], [30]]


def test_a_row_hand_checked() -> None:
    """The module docstring's example."""
    ds = PackedDataset(DOCS, 8)
    item = ds[((1, 1, 4), (0, 0, 3))]
    assert item["input_ids"].tolist() == [21, 22, 23, 10, 11, 12, 0, 0]
    assert item["position_ids"].tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    assert item["document_ids"].tolist() == [0, 0, 0, 1, 1, 1, -1, -1]
    assert item["labels"].tolist() == [-100, 22, 23, -100, 11, 12, -100, -100]
    assert item["input_ids"].dtype == torch.int64
    assert item["document_ids"].dtype == torch.int32
    batch = PackedDataset.collate([item])
    assert batch["cu_seqlens"].tolist() == [0, 3, 6, 8]
    assert batch["max_seqlen"] == 3
    assert batch["cu_seqlens"].dtype == torch.int32


def test_collate_stacks_and_covers_every_token() -> None:
    ds = PackedDataset(DOCS, 5, pad_id=-1)
    items = [ds[((0, 0, 3), (2, 0, 1))], ds[()], ds[((1, 0, 4), (0, 2, 3))]]
    assert items[1]["input_ids"].tolist() == [-1] * 5
    assert items[1]["labels"].tolist() == [IGNORE_INDEX] * 5
    batch = PackedDataset.collate(items)
    assert batch["input_ids"].shape == (3, 5)
    # row 0: spans 3 + 1 and padding 1; row 1: padding 5; row 2: spans 4 + 1, full
    assert batch["cu_seqlens"].tolist() == [0, 3, 4, 5, 10, 14, 15]
    assert batch["max_seqlen"] == 5
    with pytest.raises(ValueError, match="items must be a non-empty micro-batch"):
        PackedDataset.collate([])


def test_no_label_crosses_a_span_boundary() -> None:
    """After the model's shift (predict labels[i + 1] at i), every kept target is in the same
    span as the position that predicts it."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 100, n).tolist() for n in rng.integers(1, 30, 50)]
    plan = PackingPlan(DocumentLengths([len(d) for d in docs]), 32, window=8, chunk=2)
    ds = PackedDataset(docs, 32)
    epoch = plan.epoch(0)
    for row in epoch.rows(np.arange(epoch.num_rows)):
        a = ds.arrays(row)
        kept = np.flatnonzero(a["labels"][1:] != IGNORE_INDEX)
        assert (a["document_ids"][kept] == a["document_ids"][kept + 1]).all()
        assert (a["document_ids"][kept] >= 0).all()
        # every token of every span is in input_ids, in order
        flat = [t for d, s, e in row for t in docs[d][s:e]]
        assert a["input_ids"][: len(flat)].tolist() == flat


def test_from_megatron_reads_the_bin_through_the_pointers(tmp_path: Path) -> None:
    write_megatron(tmp_path / "c", DOCS, dtype=np.uint16)
    ds = PackedDataset.from_megatron(tmp_path / "c", 6)
    assert ds[((2, 0, 1), (1, 2, 4))]["input_ids"].tolist() == [30, 22, 23, 0, 0, 0]
    assert "3 documents" in repr(ds)


def test_from_arrow_reads_one_row_per_span() -> None:
    pa = pytest.importorskip("pyarrow")
    column = pa.chunked_array(
        [
            pa.array(DOCS[:2], type=pa.list_(pa.int32())),
            pa.array(DOCS[2:], type=pa.list_(pa.int32())),
        ]
    )
    ds = PackedDataset.from_arrow(pa.table({"input_ids": column}), 6)
    assert ds[((2, 0, 1), (1, 2, 4))]["input_ids"].tolist() == [30, 22, 23, 0, 0, 0]


def test_a_data_loader_over_packed_rows() -> None:
    rows = [((0, 0, 3),), ((1, 0, 4), (2, 0, 1)), ()]
    loader = torch.utils.data.DataLoader(
        PackedDataset(DOCS, 6), batch_sampler=[rows[:2], rows[2:]], collate_fn=PackedDataset.collate
    )
    batches = list(loader)
    assert [b["input_ids"].shape for b in batches] == [(2, 6), (1, 6)]
    assert batches[0]["cu_seqlens"].tolist() == [0, 3, 6, 10, 11, 12]


@pytest.mark.parametrize(
    ("row", "exc", "message"),
    [
        (
            ((3, 0, 1),),
            ValueError,
            "row must be spans of documents in [0, 2]; got row=((3, 0, 1),)",
        ),
        (
            ((0, 0, 4),),
            ValueError,
            "row must be spans with 0 <= start < stop <= the document's length (3 for document 0)",
        ),
        (((0, 2, 2),), ValueError, "row must be spans with 0 <= start < stop"),
        (((0, -1, 2),), ValueError, "row must be spans with 0 <= start < stop"),
        (((1, 0, 4), (0, 0, 3)), ValueError, "row must be at most seq_len=6 tokens (it has 7)"),
        ((0, 0, 3), TypeError, "row must be a tuple of (document, start, stop) spans"),
        (((0, 0),), TypeError, "row must be a tuple of (document, start, stop) spans"),
        (((0, 0.5, 3),), TypeError, "row must be a tuple of (document, start, stop) spans of ints"),
        (5, TypeError, "row must be a tuple of (document, start, stop) spans; got row=5"),
    ],
)
def test_rows_that_do_not_match_the_source_are_named(row: Any, exc: type, message: str) -> None:
    with pytest.raises(exc) as err:
        PackedDataset(DOCS, 6)[row]
    assert message in str(err.value)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="seq_len must be an int in"):
        PackedDataset(DOCS, 0)
    with pytest.raises(TypeError, match="pad_id must be an int"):
        PackedDataset(DOCS, 4, pad_id=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="token_source must be a TokenSource"):
        PackedDataset(42, 4)  # type: ignore[arg-type]


def test_a_spawned_worker_reopens_the_files(tmp_path: Path) -> None:
    """Pickling a dataset (what a DataLoader with spawned workers does) reopens the Megatron
    files by path instead of copying their maps."""
    import pickle

    write_megatron(tmp_path / "c", DOCS * 1000, dtype=np.int32)
    ds = PackedDataset.from_megatron(tmp_path / "c", 6)
    blob = pickle.dumps(ds)
    assert len(blob) < 2000
    again = pickle.loads(blob)
    assert again[((2, 0, 1), (1, 2, 4))]["input_ids"].tolist() == [30, 22, 23, 0, 0, 0]


@pytest.mark.timeout(120)
def test_a_data_loader_with_spawned_workers(tmp_path: Path) -> None:
    write_megatron(tmp_path / "c", DOCS, dtype=np.int32)
    rows = [((0, 0, 3),), ((1, 0, 4), (2, 0, 1)), ()]
    loader = torch.utils.data.DataLoader(
        PackedDataset.from_megatron(tmp_path / "c", 6),
        batch_sampler=[rows[:2], rows[2:]],
        collate_fn=PackedDataset.collate,
        num_workers=1,
        multiprocessing_context="spawn",
    )
    assert [b["input_ids"].tolist() for b in loader] == [
        [[10, 11, 12, 0, 0, 0], [20, 21, 22, 23, 30, 0]],
        [[0, 0, 0, 0, 0, 0]],
    ]
