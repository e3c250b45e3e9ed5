"""DocumentLengths and its sources: arrays and memmaps, Megatron .idx/.bin (our reader and writer,
megatron-core as an optional oracle), Arrow columns through pyarrow and HF datasets (optional).

Block totals, counts and reads equal a brute-force recount on random lengths; every source gives
the same answers; a memmap is never copied; bad lengths and corrupt files are refused naming what
is wrong.
"""

from __future__ import annotations

import doctest
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataorder.llm.packing.lengths as lengths_module
from dataorder.llm.packing.lengths import MAX_LENGTH, DocumentLengths
from dataorder.llm.packing.megatron_files import read_index, write_megatron

SETTINGS = settings(max_examples=40, deadline=None, database=None)


def documents(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, n).astype(np.int32) for n in lengths]


def sources(lengths: list[int], tmp: Path) -> dict[str, DocumentLengths]:
    """The same lengths from every kind of source we can build here."""
    arr = np.array(lengths, dtype=np.int32)
    path = tmp / "lengths.npy"
    np.save(path, arr)
    write_megatron(tmp / "corpus", documents(lengths))
    out = {
        "array": DocumentLengths(arr),
        "list": DocumentLengths(lengths),
        "npy": DocumentLengths.from_file(path),
        "megatron": DocumentLengths.from_megatron(tmp / "corpus"),
    }
    try:
        import pyarrow as pa
    except ImportError:
        return out
    column = pa.array([list(range(n)) for n in lengths], type=pa.list_(pa.int32()))
    out["arrow"] = DocumentLengths.from_arrow(pa.table({"input_ids": column}))
    half = len(lengths) // 2
    chunked = pa.chunked_array([column.slice(0, half), column.slice(half)])
    out["arrow-chunks"] = DocumentLengths.from_arrow(chunked)
    out["arrow-slice"] = DocumentLengths.from_arrow(
        pa.concat_arrays([pa.array([[1, 2]], type=column.type), column]).slice(1)
    )
    return out


@SETTINGS
@given(st.lists(st.integers(0, 300), min_size=1, max_size=200), st.integers(1, 70))
def test_every_source_agrees_with_a_recount(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], block: int
) -> None:
    tmp = tmp_path_factory.mktemp("src")
    arr = np.array(lengths, dtype=np.int64)
    for name, lens in sources(lengths, tmp).items():
        assert len(lens) == len(lengths), name
        assert lens.total_tokens == int(arr.sum()), name
        assert lens.max_length == int(arr.max()), name
        expect = [int(arr[i : i + block].sum()) for i in range(0, len(arr), block)]
        assert lens.block_totals(block).tolist() == expect, name
        assert (
            lens.block_totals(2 * block).tolist()
            == [  # from the cached finer totals
                int(arr[i : i + 2 * block].sum()) for i in range(0, len(arr), 2 * block)
            ]
        ), name
        for s in (0, 1, 50, 299):
            assert lens.count_longer_than(s) == int((arr > s).sum()), name
            assert lens.tokens_beyond(s) == int(np.maximum(arr - s, 0).sum()), name
        picks = np.arange(len(arr))[::-3]
        assert lens.take(picks).tolist() == arr[picks].tolist(), name
        assert lens.slice(1, len(arr)).tolist() == arr[1:].tolist(), name
        assert lens.take(np.zeros((0,), dtype=np.int64)).tolist() == []
    fingerprints = {k: v.fingerprint() for k, v in sources(lengths, tmp).items()}
    assert len(set(fingerprints.values())) == 1, fingerprints


def test_a_memmap_stays_a_memmap(tmp_path: Path) -> None:
    path = tmp_path / "l.i32"
    np.arange(1, 1001, dtype=np.int32).tofile(path)
    mm = np.memmap(path, dtype=np.int32, mode="r")
    lens = DocumentLengths(mm)
    assert lens._values is mm
    assert lens.total_tokens == 500500
    np.save(tmp_path / "l.npy", np.arange(10, dtype=np.int64))
    assert isinstance(DocumentLengths.from_file(tmp_path / "l.npy")._values, np.memmap)
    megatron = DocumentLengths.from_megatron(write_megatron(tmp_path / "m", [[1, 2], [3]])[0])
    assert isinstance(megatron._values, np.memmap)


def test_the_fingerprint_sees_a_change_of_one_length_or_of_the_count() -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(1, 1000, 50_000)
    seen = {DocumentLengths(base).fingerprint()}
    changed = base.copy()
    changed[31_337] += 1
    seen.add(DocumentLengths(changed).fingerprint())
    seen.add(DocumentLengths(base[:-1]).fingerprint())
    assert len(seen) == 3
    assert len(DocumentLengths(base).fingerprint()) == 16


def test_block_totals_go_through_slabs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass with many slabs, a block that does not divide the slab, and a short last slab."""
    monkeypatch.setattr(lengths_module, "SLAB", 64)
    arr = np.random.default_rng(1).integers(0, 100, 1000)
    for block in (1, 7, 64, 100, 999, 5000):
        got = DocumentLengths(arr).block_totals(block).tolist()
        assert got == [int(arr[i : i + block].sum()) for i in range(0, 1000, block)]


# -- bad lengths -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "exc", "message"),
    [
        (np.array([1.0, 2.0]), TypeError, "lengths must be an integer array"),
        (["a"], TypeError, "lengths must be an integer array"),
        (np.array([True, False]), TypeError, "lengths must be an integer array"),
        (np.zeros((2, 2), dtype=np.int64), ValueError, "lengths must be 1-D"),
        (np.zeros(0, dtype=np.int64), ValueError, "lengths must be at least one document"),
        (np.int64(3), ValueError, "lengths must be 1-D"),
    ],
)
def test_bad_arrays_are_refused_when_built(value: Any, exc: type, message: str) -> None:
    with pytest.raises(exc, match=message):
        DocumentLengths(value)


@pytest.mark.parametrize(
    "read",
    [
        lambda d: d.total_tokens,
        lambda d: d.block_totals(4),
        lambda d: d.count_longer_than(3),
        lambda d: d.max_length,
        lambda d: d.take([5, 7]),
        lambda d: d.slice(0, 10),
        lambda d: d.fingerprint(),
    ],
)
@pytest.mark.parametrize(
    ("dtype", "bad", "shown"),
    [(np.int32, -4, -4), (np.int64, -1, -1), (np.int64, 2**31, 2**31), (np.uint32, 2**31, 2**31)],
)
def test_a_bad_length_is_named_before_it_is_used(
    read: Any, dtype: Any, bad: int, shown: int
) -> None:
    arr = np.ones(10, dtype=dtype)
    arr[7] = bad
    lens = DocumentLengths(arr)  # lazy: built without a pass
    with pytest.raises(ValueError) as err:
        read(lens)
    assert f"lengths[7] must be an int in [0, {MAX_LENGTH}]" in str(err.value)
    assert f"got lengths[7]={shown}" in str(err.value)


def test_bad_reads_are_named() -> None:
    lens = DocumentLengths([1, 2, 3])
    with pytest.raises(ValueError, match=r"indices must be document indices in \[0, 2\]; got"):
        lens.take([3])
    with pytest.raises(TypeError, match="indices must be integers"):
        lens.take([0.5])
    with pytest.raises(ValueError, match="stop must be an int in"):
        lens.slice(2, 1)
    with pytest.raises(ValueError, match="block must be a positive int; got block=0"):
        lens.block_totals(0)
    with pytest.raises(ValueError, match="seq_len must be a non-negative int"):
        lens.count_longer_than(-1)


# -- Megatron files --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64, np.uint8])
def test_megatron_round_trip(tmp_path: Path, dtype: Any) -> None:
    docs = [np.arange(n, dtype=dtype) % 200 for n in (3, 0, 7, 1)]
    idx, bin_ = write_megatron(tmp_path / "c", docs, dtype=dtype)
    index = read_index(tmp_path / "c")
    assert index.dtype == np.dtype(dtype)
    assert index.sequence_lengths.tolist() == [3, 0, 7, 1]
    itemsize = np.dtype(dtype).itemsize
    assert index.sequence_pointers.tolist() == [0, 3 * itemsize, 3 * itemsize, 10 * itemsize]
    assert index.document_indices.tolist() == [0, 1, 2, 3, 4]
    assert index.total_tokens == 11
    assert bin_.stat().st_size == 11 * itemsize
    assert read_index(idx).idx_path == read_index(bin_).idx_path == idx
    lens = DocumentLengths.from_megatron(tmp_path / "c")
    assert lens.has_cumulative
    assert lens.block_totals(2).tolist() == [3, 8]


def _corrupt(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: _corrupt(p, 0, b"XXIDIDX"), "bad magic"),
        (lambda p: _corrupt(p, 9, struct.pack("<Q", 2)), "unknown version 2"),
        (lambda p: _corrupt(p, 17, bytes([9])), "unknown dtype code 9"),
        (lambda p: _corrupt(p, 18, struct.pack("<Q", 5)), "the header counts 5 sequences"),
        (lambda p: _corrupt(p, 26, struct.pack("<Q", 2**40)), "document indices, which need"),
        (lambda p: p.write_bytes(p.read_bytes()[:-3]), "the file has"),
        (lambda p: p.write_bytes(p.read_bytes()[:20]), "shorter than the 34-byte header"),
        (lambda p: _corrupt(p, 34 + 4 * 2, struct.pack("<q", 8)), "first sequence pointer is 8"),
        (lambda p: p.with_suffix(".bin").write_bytes(b"\0" * 3), "holds 3 bytes"),
    ],
)
def test_a_corrupt_index_is_refused_naming_the_file(
    tmp_path: Path, edit: Any, message: str
) -> None:
    idx, _ = write_megatron(tmp_path / "c", [[1, 2, 3], [4, 5, 6]])
    edit(idx)
    with pytest.raises(ValueError, match=message) as err:
        DocumentLengths.from_megatron(tmp_path / "c")
    assert str(tmp_path / "c") in str(err.value)


def test_missing_files_and_unknown_kinds(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DocumentLengths.from_megatron(tmp_path / "nothing")
    idx, bin_ = write_megatron(tmp_path / "c", [[1]])
    bin_.unlink()
    with pytest.raises(FileNotFoundError):
        DocumentLengths.from_megatron(idx)
    (tmp_path / "x.txt").write_text("1\n2\n")
    with pytest.raises(ValueError, match=r"path must be a Megatron \.idx/\.bin or prefix"):
        DocumentLengths.from_file(tmp_path / "x.txt")
    with pytest.raises(FileNotFoundError):
        DocumentLengths.from_file(tmp_path / "y.npy")
    with pytest.raises(ValueError, match="dtype must be one of"):
        write_megatron(tmp_path / "d", [[1]], dtype=np.uint32)


def test_pointers_that_disagree_with_lengths_are_caught_before_use(tmp_path: Path) -> None:
    from dataorder.llm.packing.plan import PackingPlan

    idx, _ = write_megatron(tmp_path / "c", [[1, 2, 3], [4, 5], [6], [7, 8]])
    _corrupt(idx, 34, struct.pack("<i", 1))  # length 3 -> 1, pointers unchanged
    lens = DocumentLengths.from_megatron(tmp_path / "c")
    plan = PackingPlan(lens, 4, window=2, chunk=2)
    with pytest.raises(ValueError, match="disagree with its cumulative counts"):
        plan.epoch(0).rows(np.arange(plan.rows_per_epoch))


def test_megatron_core_reads_our_files_and_we_read_theirs(tmp_path: Path) -> None:
    """Optional oracle: megatron-core==0.16.1 (``pip install megatron-core==0.16.1``)."""
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    torch = pytest.importorskip("torch")
    docs = documents([5, 0, 17, 2, 9], seed=3)
    write_megatron(tmp_path / "ours", docs, dtype=np.int32)
    theirs = indexed.IndexedDataset(str(tmp_path / "ours"))
    assert theirs.sequence_lengths.tolist() == [5, 0, 17, 2, 9]
    for i, doc in enumerate(docs):
        assert theirs[i].tolist() == doc.tolist()
    builder = indexed.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    for doc in docs:
        builder.add_document(torch.from_numpy(doc.astype(np.int64) % 60_000), [len(doc)])
    builder.finalize(str(tmp_path / "theirs.idx"))
    lens = DocumentLengths.from_megatron(tmp_path / "theirs")
    assert lens.take(np.arange(5)).tolist() == [5, 0, 17, 2, 9]
    assert lens.block_totals(2).tolist() == [5, 19, 9]
    from dataorder.llm.packing.dataset import PackedDataset

    ds = PackedDataset.from_megatron(tmp_path / "theirs", 32)
    item = ds.arrays(((2, 3, 10), (4, 0, 9)))
    expect = np.concatenate([docs[2][3:10], docs[4]]).astype(np.int64) % 60_000
    assert item["input_ids"][:16].tolist() == expect.tolist()


# -- Arrow and HF datasets -------------------------------------------------------------------------


def test_arrow_tables_and_files(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "input_ids": pa.array([[1, 2, 3], [], [4], None, [5, 6]], type=pa.list_(pa.int64())),
            "text": ["a", "b", "c", "d", "e"],
        }
    )
    lens = DocumentLengths.from_arrow(table)
    assert lens.take(np.arange(5)).tolist() == [3, 0, 1, 0, 2]
    assert lens.has_cumulative
    pq.write_table(table, tmp_path / "t.parquet")
    with (
        pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    with (
        pa.OSFile(str(tmp_path / "s.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    for name in ("t.parquet", "t.arrow", "s.arrow"):
        got = DocumentLengths.from_file(tmp_path / name)
        assert got.take(np.arange(5)).tolist() == [3, 0, 1, 0, 2], name
    large = pa.table({"ids": pa.array([[1], [2, 3]], type=pa.large_list(pa.int32()))})
    assert DocumentLengths.from_arrow(large, "ids").total_tokens == 3
    with pytest.raises(ValueError, match="column must name a column of the table; got column='x'"):
        DocumentLengths.from_arrow(table, "x")
    with pytest.raises(TypeError, match="column must be a list column"):
        DocumentLengths.from_arrow(table, "text")
    with pytest.raises(TypeError, match=r"data must be an HF datasets\.Dataset"):
        DocumentLengths.from_arrow({"input_ids": [[1]]})


def test_hf_datasets_with_and_without_an_indices_mapping() -> None:
    datasets = pytest.importorskip("datasets")
    rows = [list(range(n)) for n in (4, 1, 0, 7, 3, 2)]
    ds = datasets.Dataset.from_dict({"input_ids": rows, "label": list(range(6))})
    plain = DocumentLengths.from_arrow(ds)
    assert plain.take(np.arange(6)).tolist() == [4, 1, 0, 7, 3, 2]
    shuffled = ds.shuffle(seed=0)
    assert shuffled._indices is not None  # the mapping this test is about
    lens = DocumentLengths.from_arrow(shuffled)
    assert not lens.has_cumulative
    assert lens.take(np.arange(6)).tolist() == [len(r["input_ids"]) for r in shuffled]
    picked = ds.select([5, 3, 3, 0])
    assert DocumentLengths.from_arrow(picked).take(np.arange(4)).tolist() == [2, 7, 7, 4]
    assert DocumentLengths.from_arrow(picked).block_totals(3).tolist() == [16, 4]
    from dataorder.llm.packing.dataset import PackedDataset

    item = PackedDataset.from_arrow(picked, 16).arrays(((1, 2, 7), (3, 0, 4)))
    assert item["input_ids"][:9].tolist() == [2, 3, 4, 5, 6, 0, 1, 2, 3]


def test_doctests() -> None:
    assert doctest.testmod(lengths_module).failed == 0


def test_pickling_reopens_the_source_instead_of_copying_it(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "l.i32"
    np.arange(1, 5001, dtype=np.int32).tofile(path)
    np.save(tmp_path / "l.npy", np.arange(7, dtype=np.int64))
    write_megatron(tmp_path / "m", [[1, 2], [3], []])
    mm = np.memmap(path, dtype=np.int32, mode="r")
    cases = {
        "memmap": (DocumentLengths(mm), list(range(1, 5001))),
        "slice": (DocumentLengths(mm[1234:1300]), list(range(1235, 1301))),
        "npy": (DocumentLengths.from_file(tmp_path / "l.npy"), list(range(7))),
        "megatron": (DocumentLengths.from_megatron(tmp_path / "m"), [2, 1, 0]),
        "array": (DocumentLengths([4, 5]), [4, 5]),
    }
    for name, (lens, expect) in cases.items():
        blob = pickle.dumps(lens)
        assert len(blob) < 1000 or name == "array", (name, len(blob))
        again = pickle.loads(blob)
        assert again.take(np.arange(len(expect))).tolist() == expect, name
        assert again.fingerprint() == lens.fingerprint(), name
    assert isinstance(pickle.loads(pickle.dumps(cases["slice"][0]))._values, np.memmap)


def test_one_pass_serves_the_block_totals_the_total_and_the_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes = []
    slabs, totals = DocumentLengths._slabs, DocumentLengths._pass_totals

    def counted_slabs(self: DocumentLengths, slab: int) -> Any:
        passes.append(("slabs", slab))
        return slabs(self, slab)

    def counted_totals(self: DocumentLengths, block: int, count: int) -> Any:
        passes.append(("totals", block))
        return totals(self, block, count)

    monkeypatch.setattr(DocumentLengths, "_slabs", counted_slabs)
    monkeypatch.setattr(DocumentLengths, "_pass_totals", counted_totals)
    lens = DocumentLengths(np.arange(100_000) % 97)
    lens.block_totals(128)
    assert lens.total_tokens == int((np.arange(100_000) % 97).sum())
    lens.fingerprint()
    assert len(passes) == 1


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_threaded_pass_gives_the_sequential_totals_and_names_the_first_bad_length(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """The block-totals pass runs its slabs on threads; totals and the error of a bad length
    (the first in storage order, whichever thread meets it first) are the sequential pass's."""
    import dataorder.llm.packing.lengths as module

    monkeypatch.setattr(module, "pass_threads", lambda: threads)
    monkeypatch.setattr(module, "SLAB", 1024)
    values = (np.arange(50_000, dtype=np.int64) * 7919) % 1000
    assert np.array_equal(
        DocumentLengths(values).block_totals(128),
        np.add.reduceat(values, np.arange(0, 50_000, 128)),
    )
    bad = values.copy()
    bad[[30_000, 4_000]] = -1
    with pytest.raises(ValueError, match=r"lengths\[4000\] must be an int in"):
        DocumentLengths(bad).block_totals(128)


class _Rows:
    """A sequence of a million rows that counts the rows read (an HF dataset's shape)."""

    def __init__(self, table_like: bool) -> None:
        self.read = 0
        if table_like:
            self.column_names = ["input_ids"]

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int) -> list[int]:
        self.read += 1
        if not 0 <= i < len(self):
            raise IndexError(i)
        return [1, 2, 3]


@pytest.mark.parametrize("table_like", [True, False])
def test_what_is_not_lengths_is_refused_by_type_before_a_row_is_read(table_like: bool) -> None:
    from dataorder.llm.packing.sampler import PackedSampler

    rows = _Rows(table_like)
    hint = "DocumentLengths.from_arrow" if table_like else "an integer array or a list of ints"
    with pytest.raises(TypeError, match=re.escape(hint)):
        DocumentLengths(rows)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(hint)):
        PackedSampler(rows, 2048, 1, 0, 1, seed=0)  # type: ignore[arg-type]
    assert rows.read == 0


def test_an_hf_dataset_or_arrow_column_given_as_lengths_points_to_from_arrow() -> None:
    pa = pytest.importorskip("pyarrow")
    datasets = pytest.importorskip("datasets")
    table = pa.table({"input_ids": pa.array([[1, 2], [3]])})
    for data in (datasets.Dataset(datasets.table.InMemoryTable(table)), table, table[0]):
        with pytest.raises(TypeError) as err:
            DocumentLengths(data)
        assert "use DocumentLengths.from_arrow(data, column)" in str(err.value)
        assert f"got lengths='<{type(data).__name__}>'" in str(err.value)
    # what holds lengths with numpy's array protocol is still lengths
    assert DocumentLengths(pa.array([3, 0, 2])).slice(0, 3).tolist() == [3, 0, 2]


def test_an_hf_dataset_integer_column_is_read_from_arrow_through_its_mapping() -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"length": [3, 4, 5], "input_ids": [[1], [2, 3], [4]]})
    assert DocumentLengths(ds["length"]).slice(0, 3).tolist() == [3, 4, 5]
    assert DocumentLengths(ds.select([2, 0])["length"]).slice(0, 2).tolist() == [5, 3]
    with pytest.raises(TypeError, match=re.escape("use DocumentLengths.from_arrow")):
        DocumentLengths(ds["input_ids"])
