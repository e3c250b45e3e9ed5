"""Every reader of document lengths and tokens fed valid-but-unusual corpora, crossed, not sampled.

The readers are every way a corpus enters packing: an in-memory array, a memory-mapped ``.npy``,
a Megatron ``.idx``/``.bin`` pair, an Arrow IPC file, a Parquet file, an in-memory pyarrow table,
and an HF dataset (in memory, saved to disk and loaded back memory-mapped, and after
``select``). The families are corpora that are valid but unusual:

* ``null over values``: an Arrow null row whose offsets span values (valid Arrow:
  ``ListArray.from_arrays(offsets, values, mask=...)``); its length is 0 and its values are never
  trained (NOTE [ Null rows ] in ``arrow_columns``); where the format has no null (arrays, npy,
  Megatron), the same corpus with an empty document;
* ``null over values, chunked``: the same in a column of several chunks (several row groups,
  record batches, or concatenated datasets), a null in each;
* ``sliced``: a column (or array) that is a slice of a larger one, its offsets not starting at 0;
* ``large list``: a ``large_list`` column (int64 offsets);
* ``empty``: no document at all: refused, naming the file, prefix or object as given;
* ``uint64 past int64``: a length of ``2**64 - 1`` (only an array or ``.npy`` can hold it):
  refused when read, naming the value given, never its int64 wrap;
* ``all dropped``: every document longer than ``seq_len`` under ``long_documents="drop"``:
  the sampler says so (not ``drop_last``);
* ``pickled``: the lengths and a sampler over them pickled: a memory-mapped source pickles as
  how to reopen it (bytes independent of the corpus), and a worker started by ``spawn`` reads
  the same lengths.

The file readers are crossed once more through ``dataorder pack`` (a chunked file with nulls
over values, an empty file: the report's counts, or one line naming the file), and a pickle of a
file opened by a relative path reopens from another folder.

Each cell checks the lengths every read path returns (``slice``, ``take``, totals, block totals,
counts) and, where the reader has tokens, that packing every row reads exactly the valid
documents' tokens. A cell that a format cannot express is listed in ``NOT_EXPRESSIBLE`` with the
reason; ``test_the_table_is_crossed`` checks that every pair is a test or a listed reason.
"""

from __future__ import annotations

import json
import multiprocessing
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.llm.packing.dataset import PackedDataset
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.megatron_files import write_megatron
from dataorder.llm.packing.sampler import PackedSampler

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HIDDEN = 900  # the values a null row's offsets span start here: they must never be read
PAD = -1

Doc = list[int] | None  # None: a null row (over `hidden` values where the format allows)


@dataclass(frozen=True)
class Corpus:
    """Documents, and how an Arrow column holds them."""

    docs: tuple[Doc, ...]
    hidden: int = 0  # values each null row spans
    chunks: int = 1  # Arrow chunks / row groups / record batches
    sliced: int = 0  # rows of a larger column before the slice (their values come first)
    large: bool = False

    def lengths(self) -> list[int]:
        return [0 if d is None else len(d) for d in self.docs]

    def tokens(self) -> list[int]:
        return sorted(t for d in self.docs if d for t in d)


def _docs(*sizes: int | None) -> tuple[Doc, ...]:
    out: list[Doc] = []
    start = 100
    for n in sizes:
        if n is None:
            out.append(None)
        else:
            out.append(list(range(start, start + n)))
            start += n
    return tuple(out)


FAMILIES: dict[str, Corpus] = {
    "null over values": Corpus(_docs(3, None, 4, 8), hidden=5),
    "null over values, chunked": Corpus(_docs(3, None, 4, None, 8, 2), hidden=3, chunks=2),
    "sliced": Corpus(_docs(3, None, 4, 8, 1), hidden=2, sliced=2),
    "large list": Corpus(_docs(3, None, 4, 8), hidden=5, large=True),
    "empty": Corpus(()),
}
#: Families that are not a corpus but a judgement on one (their cells are below).
JUDGED = ("uint64 past int64", "all dropped", "pickled")


def arrow_column(corpus: Corpus) -> Any:
    """The corpus as a chunked Arrow list column; null rows span ``hidden`` values each."""
    docs = list(corpus.docs)
    before = [list(range(10, 10 + k)) for k in range(corpus.sliced)]  # sliced off
    rows: list[Doc] = before + docs
    chunks = max(1, corpus.chunks)
    per = -(-len(docs) // chunks) if docs else 0
    bounds = [0] + [corpus.sliced + min(len(docs), per * (k + 1)) for k in range(chunks)]
    bounds[0] = 0
    arrays = []
    hidden = HIDDEN
    for k in range(chunks):
        part = rows[bounds[k] : bounds[k + 1]]
        offsets, values, mask = [0], [], []
        for d in part:
            if d is None:
                values += list(range(hidden, hidden + corpus.hidden))
                hidden += corpus.hidden
            else:
                values += d
            offsets.append(len(values))
            mask.append(d is None)
        kind = pa.LargeListArray if corpus.large else pa.ListArray
        off_type = pa.int64() if corpus.large else pa.int32()
        arr = kind.from_arrays(
            pa.array(offsets, off_type),
            pa.array(values, pa.int64()),
            mask=pa.array(mask, pa.bool_()),
        )
        if k == 0 and corpus.sliced:
            arr = arr.slice(corpus.sliced)
        arrays.append(arr)
    typ = arrays[0].type
    return pa.chunked_array([a for a in arrays if len(a)] or [arrays[0]], type=typ)


def arrow_table(corpus: Corpus) -> Any:
    return pa.table({"input_ids": arrow_column(corpus)})


@dataclass(frozen=True)
class Opened:
    lengths: DocumentLengths
    dataset: PackedDataset | None  # tokens, where the reader has them
    mapped: bool  # the source is a file reopened by a pickle


def _hf(table: Any) -> Any:
    datasets = pytest.importorskip("datasets")
    from datasets.table import InMemoryTable

    return datasets.Dataset(InMemoryTable(table))


def open_array(corpus: Corpus, tmp: Path) -> Opened:
    lengths = np.array([99] * corpus.sliced + corpus.lengths(), dtype=np.int64)
    return Opened(DocumentLengths(lengths[corpus.sliced :]), None, False)


def open_npy(corpus: Corpus, tmp: Path) -> Opened:
    np.save(tmp / "c.npy", np.array([99] * corpus.sliced + corpus.lengths(), dtype=np.int32))
    if corpus.sliced:  # a slice of the memory map: pickled by its offset in the file
        mm = np.load(tmp / "c.npy", mmap_mode="r")
        return Opened(DocumentLengths(mm[corpus.sliced :]), None, True)
    return Opened(DocumentLengths.from_file(tmp / "c.npy"), None, True)


def open_megatron(corpus: Corpus, tmp: Path) -> Opened:
    write_megatron(tmp / "c", [[] if d is None else d for d in corpus.docs])
    return Opened(
        DocumentLengths.from_file(tmp / "c.idx"),
        PackedDataset.from_megatron(tmp / "c", 4, pad_id=PAD),
        True,
    )


def open_arrow_file(corpus: Corpus, tmp: Path) -> Opened:
    table = arrow_table(corpus)
    with pa.ipc.new_file(str(tmp / "c.arrow"), table.schema) as w:
        for batch in table.to_batches():
            w.write_batch(batch)
    mapped = pa.ipc.open_file(pa.memory_map(str(tmp / "c.arrow"))).read_all()
    return Opened(
        DocumentLengths.from_file(tmp / "c.arrow"),
        PackedDataset.from_arrow(mapped, 4, pad_id=PAD),
        True,
    )


def open_parquet(corpus: Corpus, tmp: Path) -> Opened:
    table = arrow_table(corpus)
    rows = max(1, -(-table.num_rows // max(1, corpus.chunks)))
    pq.write_table(table, tmp / "c.parquet", row_group_size=rows)
    return Opened(
        DocumentLengths.from_file(tmp / "c.parquet"),
        PackedDataset.from_arrow(pq.read_table(tmp / "c.parquet"), 4, pad_id=PAD),
        False,
    )


def open_table(corpus: Corpus, tmp: Path) -> Opened:
    table = arrow_table(corpus)
    return Opened(
        DocumentLengths.from_arrow(table), PackedDataset.from_arrow(table, 4, pad_id=PAD), False
    )


def open_hf(corpus: Corpus, tmp: Path) -> Opened:
    ds = _hf(arrow_table(corpus))
    return Opened(
        DocumentLengths.from_arrow(ds), PackedDataset.from_arrow(ds, 4, pad_id=PAD), False
    )


def open_hf_disk(corpus: Corpus, tmp: Path) -> Opened:
    datasets = pytest.importorskip("datasets")
    _hf(arrow_table(corpus)).save_to_disk(str(tmp / "hf"))
    ds = datasets.load_from_disk(str(tmp / "hf"))  # memory-mapped, pickled by its files
    return Opened(DocumentLengths.from_arrow(ds), PackedDataset.from_arrow(ds, 4, pad_id=PAD), True)


def open_hf_select(corpus: Corpus, tmp: Path) -> Opened:
    # the documents stored in reverse, read through an indices mapping that restores the order
    # (a contiguous select is a slice, with no mapping)
    stored = Corpus(corpus.docs[::-1], corpus.hidden, corpus.chunks, corpus.sliced, corpus.large)
    ds = _hf(arrow_table(stored))
    ds = ds.select(list(range(len(ds)))[::-1])
    assert ds._indices is not None
    return Opened(
        DocumentLengths.from_arrow(ds), PackedDataset.from_arrow(ds, 4, pad_id=PAD), False
    )


READERS: dict[str, Callable[[Corpus, Path], Opened]] = {
    "array": open_array,
    "npy": open_npy,
    "megatron": open_megatron,
    "arrow file": open_arrow_file,
    "parquet": open_parquet,
    "pyarrow table": open_table,
    "hf dataset": open_hf,
    "hf dataset from disk": open_hf_disk,
    "hf dataset select": open_hf_select,
}

_NO_ARROW = "lengths as integers: no list column, so no null, chunk or large_list"
_NO_UINT64 = "lengths come from offsets (int32/int64) or Megatron's int32: no uint64 length"
NOT_EXPRESSIBLE: dict[tuple[str, str], str] = {
    **{(f, r): _NO_ARROW for f in ("large list",) for r in ("array", "npy", "megatron")},
    ("sliced", "megatron"): "a Megatron pair on disk has no slice of itself",
    **{("uint64 past int64", r): _NO_UINT64 for r in READERS if r not in ("array", "npy")},
    ("empty", "hf dataset select"): "the same empty column as 'hf dataset'",
    ("empty", "hf dataset from disk"): "datasets cannot save a dataset of no rows as a table",
}


def cells(families: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(f, r) for f in families for r in READERS if (f, r) not in NOT_EXPRESSIBLE]


def test_the_table_is_crossed() -> None:
    everything = {(f, r) for f in (*FAMILIES, *JUDGED) for r in READERS}
    tested = set(cells((*FAMILIES, *JUDGED)))
    assert tested | set(NOT_EXPRESSIBLE) == everything
    assert not tested & set(NOT_EXPRESSIBLE)
    assert len(tested) == 59  # the sweep's size: change it with the table


def _packed_tokens(opened: Opened) -> list[int]:
    """Every token of one epoch of packed rows (seq_len 4, one rank, nothing dropped)."""
    assert opened.dataset is not None
    sampler = PackedSampler(opened.lengths, 4, 1, 0, 1, seed=0, drop_last=False)
    out: list[int] = []
    for batch in sampler:
        for row in batch:
            ids = opened.dataset.arrays(row)["input_ids"]
            out += [int(t) for t in ids[ids != PAD]]
    return sorted(out)


@pytest.mark.parametrize(
    ("family", "reader"), [c for c in cells(tuple(FAMILIES)) if c[0] != "empty"]
)
def test_unusual_corpus_reads_as_its_documents(family: str, reader: str, tmp_path: Path) -> None:
    corpus = FAMILIES[family]
    opened = READERS[reader](corpus, tmp_path)
    lengths, want = opened.lengths, corpus.lengths()
    n = len(want)
    assert len(lengths) == n
    assert lengths.slice(0, n).tolist() == want
    assert lengths.take(np.arange(n)[::-1]).tolist() == want[::-1]
    assert lengths.total_tokens == sum(want)
    assert lengths.max_length == max(want)
    assert lengths.block_totals(2).tolist() == [sum(want[i : i + 2]) for i in range(0, n, 2)]
    assert lengths.count_longer_than(0) == sum(1 for v in want if v)
    if opened.dataset is not None:
        got = _packed_tokens(Opened(lengths, opened.dataset, opened.mapped))
        assert got == corpus.tokens()  # every valid token once, no hidden value
        assert not [t for t in got if t >= HIDDEN]


@pytest.mark.parametrize(("family", "reader"), cells(("empty",)))
def test_an_empty_corpus_is_refused_naming_what_was_given(
    family: str, reader: str, tmp_path: Path
) -> None:
    names = {
        "array": ("lengths", "'<empty array>'"),
        "npy": ("path", "c.npy"),
        "megatron": ("prefix", "c.idx"),
        "arrow file": ("path", "c.arrow"),
        "parquet": ("path", "c.parquet"),
        "pyarrow table": ("data", "Table of 0 rows"),
        "hf dataset": ("data", "Dataset of 0 rows"),
    }
    name, given = names[reader]
    with pytest.raises(ValueError) as err:
        READERS[reader](FAMILIES[family], tmp_path)
    text = str(err.value)
    assert text.startswith(f"{name} must be "), text
    assert "at least one document" in text
    assert given in text.split(f"got {name}=")[1], text


@pytest.mark.parametrize(("family", "reader"), cells(("uint64 past int64",)))
def test_a_length_past_int64_is_named_as_given(family: str, reader: str, tmp_path: Path) -> None:
    values = np.array([5, 2**64 - 1, 3], dtype=np.uint64)
    if reader == "npy":
        np.save(tmp_path / "u.npy", values)
        lengths = DocumentLengths.from_file(tmp_path / "u.npy")
    else:
        lengths = DocumentLengths(values)
    message = f"got lengths[1]={2**64 - 1}"
    reads: list[Callable[[], object]] = [
        lambda: lengths.take([1]),
        lambda: lengths.slice(0, 3),
        lambda: lengths.total_tokens,
        lambda: lengths.max_length,
        lambda: lengths.count_longer_than(4),
        lambda: PackedSampler(lengths, 4, 1, 0, 1, seed=0),
    ]
    for read in reads:
        with pytest.raises(ValueError) as err:
            read()
        assert message in str(err.value), str(err.value)
    assert lengths.take([0, 2]).tolist() == [5, 3]


@pytest.mark.parametrize(("family", "reader"), cells(("all dropped",)))
def test_every_document_dropped_is_said_not_blamed_on_drop_last(
    family: str, reader: str, tmp_path: Path
) -> None:
    corpus = Corpus(_docs(5, 6, 9))
    lengths = READERS[reader](corpus, tmp_path).lengths
    for drop_last in (False, True):
        with pytest.raises(ValueError) as err:
            PackedSampler(
                lengths,
                4,
                1,
                0,
                1,
                seed=0,
                split="never",
                long_documents="drop",
                drop_last=drop_last,
            )
        text = str(err.value)
        assert "every document is longer than seq_len=4" in text, text
        assert "long_documents='drop'" in text
        assert "drop_last" not in text


#: Bytes a pickle of lengths over a memory-mapped corpus may take: how to reopen it, not the
#: corpus (a DataLoader worker started by spawn, a checkpointed sampler).
REOPEN_BYTES = 4096


@pytest.mark.parametrize(("family", "reader"), cells(("pickled",)))
def test_pickles_reopen_memory_mapped_sources(family: str, reader: str, tmp_path: Path) -> None:
    # 2,000 documents of 500 tokens: a copy of the corpus would be megabytes
    corpus = Corpus(tuple(list(range(k, k + 500)) for k in range(2000)), chunks=2)
    opened = READERS[reader](corpus, tmp_path)
    lengths = opened.lengths
    data = pickle.dumps(lengths)
    back = pickle.loads(data)
    assert back.slice(0, len(back)).tolist() == corpus.lengths()
    sampler = PackedSampler(lengths, 512, 1, 0, 1, seed=0)
    sent = pickle.dumps(sampler)  # before any batch fills the packing's window cache
    assert pickle.loads(sent).batch_at(0) == sampler.batch_at(0)
    if opened.mapped:
        assert len(data) < REOPEN_BYTES, f"{reader}: {len(data)} bytes"
        assert len(sent) < 2 * REOPEN_BYTES, f"{reader}: a sampler of {len(sent)} bytes"
    elif reader == "parquet":  # the lengths, 4 bytes a document; never the tokens
        assert len(data) < 4 * len(corpus.docs) + REOPEN_BYTES
    if reader in ("megatron", "hf dataset from disk"):  # their token sources reopen too
        assert opened.dataset is not None
        assert len(pickle.dumps(opened.dataset)) < REOPEN_BYTES


def _worker_total(lengths: DocumentLengths) -> tuple[int, int]:
    return len(lengths), lengths.total_tokens


@pytest.mark.timeout(120)
def test_a_spawned_worker_reads_memory_mapped_lengths_by_reopening(tmp_path: Path) -> None:
    corpus = Corpus(tuple(list(range(k, k + 300)) for k in range(1000)))
    sources = [READERS[r](corpus, tmp_path).lengths for r in ("npy", "megatron", "arrow file")]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        got = pool.map(_worker_total, sources, chunksize=1)
    assert got == [(1000, 300_000)] * 3


@pytest.mark.parametrize("reader", ["npy", "megatron", "arrow file"])
def test_a_pickle_of_a_relative_path_reopens_from_another_folder(
    reader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Corpus(_docs(3, 0, 4))
    (tmp_path / "data").mkdir()
    READERS[reader](corpus, tmp_path / "data")  # writes the file
    name = {"npy": "c.npy", "megatron": "c.idx", "arrow file": "c.arrow"}[reader]
    monkeypatch.chdir(tmp_path / "data")
    data = pickle.dumps(DocumentLengths.from_file(name))
    monkeypatch.chdir(tmp_path)  # a worker started elsewhere
    assert pickle.loads(data).slice(0, 3).tolist() == [3, 0, 4]


FILE_NAMES = {"npy": "c.npy", "megatron": "c.idx", "arrow file": "c.arrow", "parquet": "c.parquet"}


@pytest.mark.parametrize("family", ["null over values, chunked", "empty"])
@pytest.mark.parametrize("reader", list(FILE_NAMES))
def test_dataorder_pack_reads_unusual_files_or_names_them(
    family: str, reader: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataorder.tools.cli import main

    corpus = FAMILIES[family]
    try:
        READERS[reader](corpus, tmp_path)  # writes the file (and refuses an empty one)
    except ValueError:
        assert not corpus.docs
    path = tmp_path / FILE_NAMES[reader]
    code = main(["pack", str(path), "--seq-len", "4", "--json"])
    out, err = capsys.readouterr()
    if corpus.docs:
        assert code == 0, err
        report = json.loads(out)
        assert report["documents"] == len(corpus.docs)
        assert report["tokens"] == sum(corpus.lengths())  # no hidden value counted
        assert report["documents_empty"] == corpus.lengths().count(0)
        assert report["longest"] == max(corpus.lengths())
    else:
        assert code != 0
        assert "at least one document" in err, err
        assert str(path) in err, err
        assert "Traceback" not in err
