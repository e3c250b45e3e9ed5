"""The token count of every document, without loading the corpus: :class:`DocumentLengths`.

A :class:`DocumentLengths` wraps one of these sources and never copies it:

* an integer array, a ``np.memmap`` included (``DocumentLengths(lengths)``,
  :meth:`~DocumentLengths.from_file` on a ``.npy``, memory-mapped);
* a Megatron indexed dataset (:meth:`~DocumentLengths.from_megatron`): the ``.idx``'s int32
  sequence lengths, memory-mapped, and its pointers as cumulative token counts
  (:mod:`dataorder.llm.packing.megatron_files`);
* an Arrow list column (:meth:`~DocumentLengths.from_arrow`): an HF dataset or a pyarrow table;
  one chunk with no indices mapping is read through its offsets (cumulative counts, zero-copy),
  anything else through lengths computed once from the offsets
  (:mod:`dataorder.llm.packing.arrow_columns`); a null row is a document of no tokens, whatever
  its offsets span (NOTE [ Null rows ] there);
* a Parquet file (:meth:`~DocumentLengths.from_file`): its list column decoded a batch of rows at
  a time, only the lengths kept.

Where cumulative counts exist, the tokens of a block of consecutive documents cost two lookups;
otherwise :meth:`~DocumentLengths.block_totals` makes one vectorised pass in slabs.

NOTE [ Length bounds ]
    A length is an int in ``[0, MAX_LENGTH]`` (``2**31 - 1``, Megatron's int32 lengths) and there
    are at most :data:`MAX_DOCUMENTS` (``2**32``) documents, so every total of tokens, of a
    window, a block or the whole corpus, is below ``2**63``: exact in int64, never wrapped.
    Zero-length documents are allowed: they pack into nothing and are counted
    (``len(lengths) - count_longer_than(0)``).

NOTE [ Pickled lengths ]
    A pickle (a sampler sent to a spawned worker, a checkpointed object) says how to reopen the
    source, never copies a file: a memory-mapped ``.npy`` by its path, offset and shape; a
    Megatron index by its prefix; an ``.arrow`` file read by :meth:`~DocumentLengths.from_file`
    by its path (the table is a memory map; pickling it would copy every token); an HF dataset
    as ``datasets`` pickles it (a reference to its cache files). What has no file behind it is
    pickled by value: an in-memory array, a pyarrow table given to
    :meth:`~DocumentLengths.from_arrow` (even a memory-mapped one: a table does not know its
    file; :meth:`~DocumentLengths.from_file` does), and the lengths read
    from a Parquet file (4 bytes a document: Parquet stores no offsets, so reopening would
    decode every token again). A reopened source reads the file as it is then.

Validation is lazy but always precedes use: the dtype, the shape and the size are checked when
the object is built; the values when they are first read: by every full pass (block totals,
counts, the largest length) and by :meth:`~DocumentLengths.take`/:meth:`~DocumentLengths.slice`,
which check what they return. A bad value raises a ValueError naming ``lengths[i]``, the first
bad index the read saw.
"""

from __future__ import annotations

import array
import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_index_array, check_int, fail
from dataorder.core.keys import derive_key
from dataorder.core.permutation import Permutation
from dataorder.llm.packing.arrow_columns import (
    ListColumn,
    integer_column,
    list_column,
    require_pyarrow,
)
from dataorder.llm.packing.megatron_files import index_paths, read_index, require_regular_file

__all__ = [
    "FINGERPRINT_BLOCK",
    "MAX_DOCUMENTS",
    "MAX_LENGTH",
    "MAX_PASS_THREADS",
    "SLAB",
    "DocumentLengths",
    "pass_threads",
]

IntArray = npt.NDArray[np.int64]

#: The largest document length (NOTE [ Length bounds ]).
MAX_LENGTH = 2**31 - 1
#: The largest number of documents (NOTE [ Length bounds ]).
MAX_DOCUMENTS = 2**32
#: Documents per slab of a full pass: a slab of int32 lengths is 4 MB, so a second look at it
#: (the bounds check) reads from the cache, and the temporaries of a pass stay small.
SLAB = 2**20
#: Most threads a pass over array lengths uses (:func:`pass_threads`).
MAX_PASS_THREADS = 8
# Rows of a Parquet file decoded at a time by DocumentLengths.from_file (a batch of 8,192-token
# rows is 32 MB of int32 tokens; only the lengths are kept).
_PARQUET_BATCH = 2**10


def pass_threads() -> int:
    """Threads for a pass over array lengths: the CPUs this process may run on, at most
    :data:`MAX_PASS_THREADS`."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, min(MAX_PASS_THREADS, usable))


#: Block size of the block totals in :meth:`DocumentLengths.fingerprint` (computed from any
#: cached finer block totals that divide it, e.g. the packing chunk of 128).
FINGERPRINT_BLOCK = 2**14
#: Lengths sampled (at keyed positions) by :meth:`DocumentLengths.fingerprint`.
FINGERPRINT_SAMPLES = 1024
_FINGERPRINT_VERSION = 1

# cumulative counts at document boundaries: indices in [0, N] -> tokens before them
_Cumulative = Callable[[IntArray], IntArray]


class DocumentLengths:
    """Token counts of ``N`` documents, from an array, a Megatron index or an Arrow column.

    Args:
        lengths: A 1-D integer array (a ``np.memmap`` stays a memory map, nothing is copied;
            anything with numpy's array protocol) or a list, tuple or range of ints; at least
            one document, at most :data:`MAX_DOCUMENTS`; values in ``[0, MAX_LENGTH]``,
            checked when first read, before any cast (NOTE [ Length bounds ]). An HF dataset's
            integer column (``ds["length"]``) is read from its Arrow buffers; an HF dataset or
            an Arrow table is refused by type before a row is read: use :meth:`from_arrow`.

    Raises:
        TypeError: If ``lengths`` is not integers.
        ValueError: If it is not 1-D, is empty, or holds too many documents.

    Example:
        >>> lengths = DocumentLengths(np.array([5, 0, 12, 3], dtype=np.int32))
        >>> len(lengths), lengths.total_tokens, lengths.max_length
        (4, 20, 12)
        >>> lengths.block_totals(2).tolist(), lengths.count_longer_than(4)
        ([5, 15], 2)
        >>> lengths.take([2, 0]).tolist(), lengths.tokens_beyond(4)
        ([12, 5], 9)
    """

    __slots__ = (
        "_beyond",
        "_blocks",
        "_cumulative",
        "_fingerprint",
        "_max",
        "_n",
        "_origin",
        "_source",
        "_total",
        "_values",
    )

    def __init__(self, lengths: npt.ArrayLike) -> None:
        if isinstance(lengths, np.ndarray):
            values = lengths
        elif _is_dataset_column(lengths):  # ds["length"]: read from Arrow, no row decoded
            column: Any = lengths
            values = integer_column(column.source, column.column_name)
        else:
            _refuse_by_type(lengths)
            try:
                values = np.asarray(lengths)
            except ValueError:  # ragged nesting: numpy's own words would not name the argument
                fail("lengths", "a 1-D integer array", f"<{type(lengths).__name__} of sequences>")
        self._init_array(values, ("lengths", "<empty array>"), f"array of {values.dtype}")

    def _init_array(self, values: npt.NDArray[Any], given: tuple[str, object], source: str) -> None:
        if values.size == 0 and values.ndim == 1:  # np.asarray([]) is float64: say what is wrong
            self._setup(values, None, values.shape, source, given)  # raises, naming `given`
        if values.dtype.kind not in "iu":
            fail("lengths", "an integer array", f"<array of dtype {values.dtype}>", TypeError)
        self._setup(values, None, values.shape, source, given)
        self._origin: tuple[Any, ...] = _array_origin(values)

    def _setup(
        self,
        values: npt.NDArray[Any] | None,
        cumulative: _Cumulative | None,
        shape: tuple[int, ...],
        source: str,
        given: tuple[str, object] = ("lengths", "<empty array>"),
    ) -> None:
        """``given``: the argument an empty source is named by, and its value as given."""
        if len(shape) != 1:
            fail("lengths", "1-D", f"<array of shape {shape}>")
        if shape[0] == 0:
            name, value = given
            if name == "lengths":
                fail(name, "at least one document", value)
            fail(name, f"a source of at least one document ({source} holds none)", value)
        if shape[0] > MAX_DOCUMENTS:
            fail("lengths", f"at most {MAX_DOCUMENTS} documents", f"<{shape[0]} documents>")
        self._n = int(shape[0])
        self._values = values
        self._cumulative = cumulative
        self._source = source
        self._total: int | None = None
        self._max: int | None = None
        self._blocks: dict[int, IntArray] = {}
        self._beyond: dict[int, tuple[int, int]] = {}
        self._fingerprint: str | None = None

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_megatron(cls, prefix: str | os.PathLike[str]) -> DocumentLengths:
        """The sequence lengths of a Megatron indexed dataset, memory-mapped.

        Args:
            prefix: The path prefix (``prefix.idx``, ``prefix.bin``), or either file.

        Raises:
            FileNotFoundError: If a file is missing.
            ValueError: If the ``.idx`` is truncated or corrupt, or the ``.bin`` has another size
                (:func:`~dataorder.llm.packing.megatron_files.read_index`), or it holds no
                sequence (naming ``prefix`` and the ``.idx``).
        """
        index = read_index(prefix)
        self = cls.__new__(cls)
        n, size, total = index.num_sequences, index.dtype.itemsize, index.total_tokens
        pointers = index.sequence_pointers

        def cumulative(at: IntArray) -> IntArray:
            inside = at < n
            out = np.full(at.shape, total, dtype=np.int64)
            out[inside] = pointers[at[inside]] // size
            return out

        self._setup(
            index.sequence_lengths,
            cumulative,
            (n,),
            f"Megatron index {index.idx_path}",
            ("prefix", os.fspath(prefix)),
        )
        self._origin = ("megatron", os.path.abspath(prefix))  # a worker may run elsewhere
        return self

    @classmethod
    def from_arrow(cls, data: Any, column: str = "input_ids") -> DocumentLengths:
        """The lengths of a list column of an HF ``datasets.Dataset`` or a pyarrow table.

        No row is decoded: lengths come from the column's offsets. A one-chunk column with no
        indices mapping is read through its offsets in place (cumulative counts for free);
        several chunks or a mapping (``select``, ``shuffle``, ``filter``) cost one vectorised
        pass that stores an int64 length per row.

        Args:
            data: An HF dataset, a pyarrow Table, or a pyarrow (chunked) list array.
            column: The list column of token ids (ignored for an array).

        Raises:
            ImportError: If pyarrow is not installed.
            TypeError: If ``data`` or the column has the wrong type.
            ValueError: If the table has no such column, or no row.
        """
        col = list_column(data, column)
        given = ("data", f"<{type(data).__name__} of 0 rows>")
        return cls._from_column(col, ("arrow", data, column), given)

    @classmethod
    def _from_column(
        cls, col: ListColumn, origin: tuple[Any, ...], given: tuple[str, object]
    ) -> DocumentLengths:
        self = cls.__new__(cls)
        self._origin = origin
        source = f"Arrow column {col.name!r}"
        offsets = col.offsets()
        if offsets is None:
            self._setup(col.lengths(), None, (len(col),), source, given)
            return self
        base = int(offsets[0]) if offsets.shape[0] else 0

        def cumulative(at: IntArray) -> IntArray:
            return offsets[at].astype(np.int64) - base

        self._setup(None, cumulative, (len(col),), source, given)
        return self

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], column: str = "input_ids") -> DocumentLengths:
        """Lengths from a file, by its name: a Megatron ``.idx``/``.bin`` or prefix, a ``.npy``
        (memory-mapped), or a ``.parquet``/``.arrow`` file (the list column ``column``; an
        ``.arrow`` file, IPC file or stream as ``datasets`` caches them, is memory-mapped; a
        ``.parquet`` file is decoded a batch of rows at a time and only its lengths are kept).
        A pickle reopens the file, except a Parquet file's, whose lengths are pickled (NOTE
        [ Pickled lengths ]).

        Raises:
            FileNotFoundError: If the file is missing.
            ValueError: If the kind of file is not recognised, it is unreadable, or it holds no
                document (naming ``path``).
        """
        if not isinstance(path, str | os.PathLike):
            fail("path", "a str or os.PathLike", path, TypeError)
        p = Path(path)
        suffix = p.suffix.lower()
        known = (".npy", ".parquet", ".arrow", ".feather", ".ipc")
        if suffix in (".idx", ".bin") or (
            suffix not in known and not p.exists() and index_paths(p)[0].exists()
        ):
            return cls.from_megatron(p)
        if suffix not in known:
            if not p.exists():
                raise FileNotFoundError(2, "No such file or directory", str(p))
            raise ValueError(
                "path must be a Megatron .idx/.bin or prefix, a .npy, a .parquet or an .arrow "
                f"file; got path={os.fspath(path)!r}"
            )
        # os.stat only (a link loop, a missing file raise as such): a FIFO would block open()
        require_regular_file(p)
        given = ("path", os.fspath(path))
        if suffix == ".npy":
            try:
                values = np.load(p, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as err:
                raise ValueError(f"{p} is not a readable .npy file of lengths: {err}") from None
            self = cls.__new__(cls)
            self._init_array(values, given, f"array of {values.dtype} in {p}")
            return self
        pa = require_pyarrow()
        try:
            if suffix == ".parquet":
                return cls._from_parquet(p, column, given)
            try:
                table = pa.ipc.open_file(pa.memory_map(str(p))).read_all()
            except pa.ArrowInvalid:
                table = pa.ipc.open_stream(pa.memory_map(str(p))).read_all()
        except (pa.ArrowException, OSError) as err:
            raise ValueError(f"{p} is not a readable {suffix[1:]} file: {err}") from None
        # memory-mapped: the offsets are read in place, and a pickle reopens the file
        # (NOTE [ Pickled lengths ])
        origin = ("file", os.path.abspath(p), column)  # a worker may run in another folder
        return cls._from_column(list_column(table, column), origin, given)

    @classmethod
    def _from_parquet(cls, p: Path, column: str, given: tuple[str, object]) -> DocumentLengths:
        """The lengths of a Parquet file's list column, one batch of rows at a time: Parquet
        stores no offsets, so each batch is decoded, its lengths kept and its tokens dropped
        (peak memory: one batch, never the column)."""
        import pyarrow.parquet as pq

        # buffered reads, no pre-buffering: pages are read as decoded, not a row group at once
        f = pq.ParquetFile(p, buffer_size=2**20, pre_buffer=False)
        names = f.schema_arrow.names
        if column not in names:
            raise ValueError(
                f"column must name a column of the table; got column={column!r} "
                f"(columns: {', '.join(names)})"
            )
        parts = [
            list_column(batch.column(0), column).lengths()
            for batch in f.iter_batches(batch_size=_PARQUET_BATCH, columns=[column])
        ]
        if not parts:  # no row group: the column's type is still checked
            list_column(f.schema_arrow.empty_table(), column)
        lengths = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if lengths.size and int(lengths.max()) <= MAX_LENGTH:
            lengths = lengths.astype(np.int32)  # half the memory; the values are unchanged
        self = cls.__new__(cls)
        self._setup(lengths, None, lengths.shape, f"Arrow column {column!r} of {p}", given)
        self._origin = ("array", lengths)
        return self

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle how to reopen the source, never a copy of a memory map (NOTE [ Pickled
        lengths ])."""
        return _reopen, self._origin

    # -- sizes ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"DocumentLengths({self._n} documents, {self._source})"

    @property
    def source(self) -> str:
        """What the lengths are read from, for messages."""
        return self._source

    @property
    def has_cumulative(self) -> bool:
        """Whether the source stores cumulative token counts (block totals cost lookups)."""
        return self._cumulative is not None

    @property
    def total_tokens(self) -> int:
        """Tokens in all documents (from the cumulative counts, cached block totals, or one
        pass; cached)."""
        if self._total is None:
            if self._cumulative is not None:
                end = self._cumulative(np.array([0, self._n], dtype=np.int64))
                self._total = int(end[1] - end[0])
                if self._total < 0:
                    raise ValueError(
                        f"lengths ({self._source}) has cumulative counts that decrease: "
                        f"{self._total} tokens in all"
                    )
            elif self._blocks:  # any cached block totals add up to it
                self._total = int(next(iter(self._blocks.values())).sum())
            else:
                self._total = int(self.block_totals(min(self._n, SLAB)).sum())
        return self._total

    @property
    def max_length(self) -> int:
        """The longest document (one pass, cached)."""
        if self._max is None:
            self._max = max(int(s.max()) for _, s in self._slabs(SLAB))
        return self._max

    # -- reads ----------------------------------------------------------------------------------
    def take(self, indices: npt.ArrayLike) -> IntArray:
        """The lengths of documents ``indices`` (any shape), int64, checked.

        Raises:
            TypeError: If ``indices`` is not integers.
            ValueError: If an index is out of range, or a length read is out of bounds.
        """
        idx = check_index_array("indices", indices, self._n, "document indices")
        if self._values is not None:
            raw = self._values[idx]
            self._check_values(raw, idx)  # before the cast: a uint64 past int64 would wrap
            return raw.astype(np.int64)
        out: IntArray = self._counts(idx + 1) - self._counts(idx)
        self._check_values(out, idx)
        return out

    def slice(self, start: int, stop: int) -> IntArray:
        """The lengths of documents ``[start, stop)``, int64, checked."""
        start = check_int("start", start, min_value=0, max_value=self._n)
        stop = check_int("stop", stop, min_value=start, max_value=self._n)
        return self._read(start, stop)

    def _read(self, start: int, stop: int) -> IntArray:
        if self._values is not None:
            raw = self._values[start:stop]
            self._check_values(raw, start)  # before the cast: a uint64 past int64 would wrap
            return raw.astype(np.int64)
        out: IntArray = np.diff(self._counts(np.arange(start, stop + 1, dtype=np.int64)))
        self._check_values(out, start)
        return out

    def _counts(self, at: IntArray) -> IntArray:
        """Cumulative counts at document boundaries ``at`` (a source without them has lengths
        and never asks)."""
        if self._cumulative is None:
            raise RuntimeError(f"lengths ({self._source}) stores no cumulative counts")
        return self._cumulative(at)

    def _check_values(self, values: npt.NDArray[Any], where: IntArray | int) -> None:
        """Raise naming ``lengths[i]`` if a value read is outside ``[0, MAX_LENGTH]``;
        ``where`` is the indices read, or the first index of a contiguous read."""
        if not values.size:
            return
        # int32 (Megatron's lengths) cannot exceed MAX_LENGTH, and unsigned ints are never below 0:
        # only the bound a dtype can break costs a look at the values.
        low = values.dtype.kind == "i" and int(values.min()) < 0
        high = np.iinfo(values.dtype).max > MAX_LENGTH and int(values.max()) > MAX_LENGTH
        if not (low or high):
            return
        flat = values.ravel()
        j = int(np.flatnonzero((flat < 0) | (flat > MAX_LENGTH))[0])
        i = int(np.ravel(where)[j]) if isinstance(where, np.ndarray) else where + j
        fail(f"lengths[{i}]", f"an int in [0, {MAX_LENGTH}] ({self._source})", int(flat[j]))

    def _slabs(self, slab: int) -> Any:
        """``(start, lengths)`` of consecutive slabs of ``slab`` documents, each checked."""
        for start in range(0, self._n, slab):
            stop = min(self._n, start + slab)
            if self._values is not None:
                values = self._values[start:stop]
                self._check_values(values, start)
                yield start, values
            else:
                yield start, self._read(start, stop)

    # -- totals and counts ----------------------------------------------------------------------
    def block_totals(self, block: int) -> IntArray:
        """Tokens in each block of ``block`` consecutive documents (the last one may be shorter):
        int64, ``ceil(N / block)`` entries, cached per block size.

        From the cumulative counts when the source has them (``N / block`` lookups); else from
        cached totals of a finer block that divides ``block``; else one vectorised pass in slabs
        of about :data:`SLAB` documents, which also checks every length.
        """
        # a block of N or more documents is one block: the same totals as a block of N
        block = min(check_int("block", block, min_value=1), self._n)
        cached = self._blocks.get(block)
        if cached is not None:
            return cached
        count = -(-self._n // block)
        if self._cumulative is not None:
            edges = np.minimum(np.arange(count + 1, dtype=np.int64) * block, self._n)
            totals = np.diff(self._cumulative(edges))
            if totals.size and int(totals.min()) < 0:
                k = int(np.flatnonzero(totals < 0)[0])
                raise ValueError(
                    f"lengths ({self._source}) has cumulative counts that decrease in documents "
                    f"[{k * block}, {min(self._n, (k + 1) * block)})"
                )
        else:
            finer = [b for b in self._blocks if block % b == 0]
            if finer:
                b = max(finer)
                totals = _group_sums(self._blocks[b], block // b)
            else:
                totals = self._pass_totals(block, count)
        totals.flags.writeable = False  # cached and shared by every caller
        self._blocks[block] = totals
        return totals

    def _pass_totals(self, block: int, count: int) -> IntArray:
        """Block totals from one pass over the lengths, checking each, in slabs spread over
        :func:`pass_threads` threads when the lengths are an array (numpy sums and bounds
        checks release the GIL: a pass over 10^9 int32 lengths is memory-bound)."""
        totals = np.empty(count, dtype=np.int64)
        step = max(block, SLAB // block * block)

        def one(start: int) -> None:
            stop = min(self._n, start + step)
            if self._values is not None:
                values = self._values[start:stop]
                self._check_values(values, start)
            else:
                values = self._read(start, stop)
            whole = values.shape[0] // block * block
            k = start // block
            if whole:
                rows = values[:whole].reshape(-1, block)
                totals[k : k + whole // block] = rows.sum(axis=1, dtype=np.int64)
            if whole < values.shape[0]:
                totals[-1] = int(values[whole:].sum(dtype=np.int64))

        starts = range(0, self._n, step)
        threads = pass_threads() if self._values is not None else 1
        if threads > 1 and len(starts) > 1:
            with ThreadPoolExecutor(threads) as pool:
                # in order: the first bad slab is the one named, as in a sequential pass
                for _ in pool.map(one, starts):
                    pass
        else:
            for start in starts:
                one(start)
        return totals

    def count_longer_than(self, seq_len: int) -> int:
        """Documents with more than ``seq_len`` tokens (one pass per ``seq_len``, cached)."""
        return self._beyond_pass(seq_len)[0]

    def tokens_beyond(self, seq_len: int) -> int:
        """``sum(max(0, L - seq_len))``: the tokens past ``seq_len`` in all documents (cached)."""
        return self._beyond_pass(seq_len)[1]

    def _beyond_pass(self, seq_len: int) -> tuple[int, int]:
        seq_len = check_int("seq_len", seq_len, min_value=0)
        hit = self._beyond.get(seq_len)
        if hit is None:
            count = tokens = 0
            for _, values in self._slabs(SLAB):
                over = values[values > seq_len]
                count += int(over.shape[0])
                tokens += int(over.sum(dtype=np.int64)) - seq_len * int(over.shape[0])
            hit = self._beyond[seq_len] = (count, tokens)
        return hit

    def fingerprint(self) -> str:
        """A 16-hex-digit BLAKE2b digest of the lengths, cached.

        It covers: the number of documents, the total tokens, every block total at
        :data:`FINGERPRINT_BLOCK` documents (so any change that alters the tokens of a block of
        16,384 documents), and the lengths at :data:`FINGERPRINT_SAMPLES` keyed positions (so
        most reorderings inside a block). A change that keeps every block total and misses the
        sampled positions is not seen. The cost is at most one block-totals pass, none when
        finer block totals dividing the block (the packing chunk) or cumulative counts exist.
        """
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=8, person=b"dataorder.lens")
            h.update(f"v{_FINGERPRINT_VERSION}:{self._n}:{self.total_tokens}:".encode())
            h.update(np.ascontiguousarray(self.block_totals(FINGERPRINT_BLOCK), "<i8").tobytes())
            m = min(self._n, FINGERPRINT_SAMPLES)
            key = derive_key(0, epoch=0, stream="packed", purpose="length-fingerprint")
            where = Permutation(self._n, key)(np.arange(m, dtype=np.int64))
            h.update(np.ascontiguousarray(self.take(np.sort(where)), "<i8").tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint


def _is_dataset_column(lengths: object) -> bool:
    """Whether ``lengths`` is a column of an HF dataset (``ds["length"]``, a lazy sequence that
    ``datasets`` returns with its dataset and column name)."""
    source = getattr(lengths, "source", None)
    return isinstance(getattr(lengths, "column_name", None), str) and hasattr(
        source, "column_names"
    )


def _refuse_by_type(lengths: object) -> None:
    """Refuse what is not lengths before ``np.asarray`` walks it: an HF dataset or an Arrow
    table is a sequence of rows, and converting it would decode every row first (O(N)) to fail
    on the result. Lengths are an array (anything with numpy's array protocol: a tensor, a
    pyarrow integer array) or a list, tuple, range or ``array.array`` of ints."""
    name = type(lengths).__name__
    is_list = False
    typ = getattr(lengths, "type", None)
    if type(lengths).__module__.startswith("pyarrow") and typ is not None:
        is_list = any(
            getattr(typ, attr, None) is not None for attr in ("value_type", "value_field")
        )
    if hasattr(lengths, "column_names") or is_list:
        fail(
            "lengths",
            "document lengths (an integer array); for the list column of an HF dataset or a "
            "pyarrow table, use DocumentLengths.from_arrow(data, column)",
            f"<{name}>",
            TypeError,
        )
    protocol = ("__array__", "__array_interface__", "__array_struct__")
    if not isinstance(lengths, list | tuple | range | array.array) and not any(
        hasattr(lengths, attr) for attr in protocol
    ):
        fail("lengths", "an integer array or a list of ints", f"<{name}>", TypeError)


def _array_origin(values: npt.NDArray[Any]) -> tuple[Any, ...]:
    """How to pickle an array source: a file-backed memory map by its file, else by value."""
    mapped = getattr(values, "_mmap", None)  # numpy keeps the mmap.mmap of a memmap here
    if isinstance(values, np.memmap) and mapped is not None and values.flags.c_contiguous:
        # The map starts at the allocation boundary at or below `offset`; a slice of it starts
        # further in. Its position in the file is where its data sits in the map.
        import mmap

        start = values.offset - values.offset % mmap.ALLOCATIONGRANULARITY
        base = np.frombuffer(mapped, dtype=np.uint8).ctypes.data
        position = start + values.ctypes.data - base
        return ("memmap", values.filename, values.dtype.str, position, values.shape[0])
    return ("array", np.asarray(values))


def _reopen(kind: str, *args: Any) -> DocumentLengths:
    """The inverse of :meth:`DocumentLengths.__reduce__`."""
    if kind == "megatron":
        return DocumentLengths.from_megatron(args[0])
    if kind == "arrow":
        return DocumentLengths.from_arrow(args[0], args[1])
    if kind == "file":
        return DocumentLengths.from_file(args[0], args[1])
    if kind == "memmap":
        path, dtype, offset, count = args
        return DocumentLengths(
            np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))
        )
    return DocumentLengths(args[0])


def _group_sums(totals: IntArray, factor: int) -> IntArray:
    """Sums of ``factor`` consecutive entries (the last group may be shorter)."""
    whole = totals.shape[0] // factor * factor
    out: IntArray = totals[:whole].reshape(-1, factor).sum(axis=1, dtype=np.int64)
    if whole < totals.shape[0]:
        out = np.append(out, totals[whole:].sum(dtype=np.int64))
    return out
