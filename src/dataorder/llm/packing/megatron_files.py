"""Megatron indexed datasets (``prefix.idx`` / ``prefix.bin``): our own reader and a small writer.

megatron-core's ``IndexedDatasetBuilder`` writes a tokenized corpus as two files. ``prefix.bin``
is every token of every sequence, back to back, in one numpy dtype. ``prefix.idx`` is a small
header and three arrays, all little-endian::

    offset  size         field
    0       9            magic b"MMIDIDX\\x00\\x00"
    9       8  (uint64)  version, always 1
    17      1  (uint8)   dtype code of the tokens in .bin: 1 uint8, 2 int8, 3 int16, 4 int32,
                         5 int64, 6 float64, 7 float32, 8 uint16
    18      8  (uint64)  S, the number of sequences
    26      8  (uint64)  D, the number of document indices (documents + 1)
    34      4 S (int32)  sequence lengths, in tokens
    ...     8 S (int64)  sequence pointers: the byte offset of each sequence in .bin
    ...     8 D (int64)  document indices: document k is sequences [idx[k], idx[k + 1])
    ...     S   (int8)   sequence modes, only in multimodal datasets (ignored here)

The builder writes the sequences contiguously, so pointer ``i`` is ``itemsize`` times the number
of tokens before sequence ``i``: cumulative token counts cost a lookup, not a pass, and the
``.bin`` holds exactly ``pointer[S - 1] + itemsize * length[S - 1]`` bytes. GPT training reads
*sequences* as its documents (``GPTDataset`` packs ``sequence_lengths``), and so do we: a
"document" of :mod:`dataorder.llm.packing` is a Megatron sequence.

:func:`read_index` memory-maps the arrays (nothing is copied) after checking the header, the
sizes against the file's size, and the ``.bin`` size against the last pointer.
:func:`write_megatron` writes the same format, as a test and benchmark helper: the tests need no
megatron-core, and megatron-core reads what it writes (an optional oracle test checks both ways).
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "DTYPE_CODES",
    "INDEX_MAGIC",
    "MegatronIndex",
    "index_paths",
    "read_index",
    "require_regular_file",
    "write_megatron",
]

#: The first 9 bytes of every ``.idx``.
INDEX_MAGIC = b"MMIDIDX\x00\x00"
#: Token dtypes by their code in the header (megatron-core's ``DType``).
DTYPE_CODES: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, document indices


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def require_regular_file(path: str | os.PathLike[str]) -> int:
    """Return the size of ``path`` if it is a regular file (a symbolic link to one included).

    Only ``os.stat`` looks at it: a FIFO would block ``open()`` until a writer comes (forever,
    beside a dataset), a device never ends, a directory cannot be mapped. The same rule as the
    scans' NOTE [ Regular files only ] in :mod:`dataorder.diffusion.scan.files`, raising a
    ValueError here: a corpus named on the command line is an argument, not a file to skip.

    Raises:
        FileNotFoundError: If ``path`` does not exist (or is a broken link).
        ValueError: If ``path`` is a directory, FIFO, socket or device, naming it.
        OSError: If it cannot be examined (a link loop, no permission on its folder).
    """
    info = os.stat(path)
    if stat.S_ISREG(info.st_mode):
        return info.st_size
    what = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
    raise ValueError(f"{os.fspath(path)} is {what}, not a regular file (it was not opened)")


def index_paths(prefix: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(prefix.idx, prefix.bin)``; a ``prefix`` already ending in ``.idx`` or ``.bin`` is
    trimmed first, so the CLI may be given either file."""
    if not isinstance(prefix, str | os.PathLike):
        raise TypeError(f"prefix must be a str or os.PathLike; got prefix={prefix!r}")
    text = os.fspath(prefix)
    if text.endswith((".idx", ".bin")):
        text = text[:-4]
    return Path(text + ".idx"), Path(text + ".bin")


@dataclass(frozen=True)
class MegatronIndex:
    """The arrays of a ``.idx`` file, memory-mapped. Build with :func:`read_index`.

    Attributes:
        idx_path: The ``.idx`` file.
        bin_path: The ``.bin`` file beside it.
        dtype: The dtype of the tokens in ``.bin``.
        sequence_lengths: int32, one per sequence (read-only memory map).
        sequence_pointers: int64 byte offsets of the sequences in ``.bin`` (read-only map).
        document_indices: int64, documents + 1 entries (read-only map).
    """

    idx_path: Path
    bin_path: Path
    dtype: np.dtype[Any]
    sequence_lengths: npt.NDArray[np.int32]
    sequence_pointers: npt.NDArray[np.int64]
    document_indices: npt.NDArray[np.int64]

    @property
    def num_sequences(self) -> int:
        """Sequences in the dataset (our documents)."""
        return int(self.sequence_lengths.shape[0])

    @property
    def total_tokens(self) -> int:
        """Tokens in ``.bin``, from the last pointer (no pass over the lengths)."""
        n = self.num_sequences
        if n == 0:
            return 0
        last = int(self.sequence_pointers[n - 1]) + self.dtype.itemsize * int(
            self.sequence_lengths[n - 1]
        )
        return last // self.dtype.itemsize

    def tokens(self) -> npt.NDArray[Any]:
        """The ``.bin`` file, memory-mapped read-only as one flat array of tokens."""
        if self.total_tokens == 0:
            return np.zeros(0, dtype=self.dtype)
        have, expect = require_regular_file(self.bin_path), self.total_tokens * self.dtype.itemsize
        if have < expect:
            raise ValueError(
                f"{self.bin_path} holds {have} bytes, but {self.idx_path} says {expect}"
            )
        return np.memmap(self.bin_path, dtype=self.dtype, mode="r", shape=(self.total_tokens,))

    def sequence_span(self, sequence: int) -> tuple[int, int]:
        """``(first, stop)``: where sequence ``sequence``'s tokens are in :meth:`tokens`, after
        checking its pointer against its length and the next pointer (O(1); the reader checks
        only the first and the last pointer up front, so a corrupt one in between is named when
        its sequence is read, never read as another sequence's tokens).

        Raises:
            ValueError: Naming the ``.idx`` and the sequence, if they disagree.
        """
        size, n = self.dtype.itemsize, self.num_sequences
        pointer, length = (
            int(self.sequence_pointers[sequence]),
            int(self.sequence_lengths[sequence]),
        )
        end = (
            int(self.sequence_pointers[sequence + 1])
            if sequence + 1 < n
            else self.total_tokens * size
        )
        if pointer < 0 or length < 0 or pointer % size or pointer + length * size != end:
            raise _corrupt(
                self.idx_path,
                f"sequence {sequence} has length {length} at byte {pointer}, but the next sequence "
                f"starts at byte {end} (itemsize {size})",
            )
        return pointer // size, pointer // size + length


def _corrupt(path: Path, what: str) -> ValueError:
    return ValueError(f"{path} is not a readable Megatron index: {what}")


def _map(path: Path, dtype: type[Any], offset: int, count: int) -> npt.NDArray[Any]:
    """``count`` items of ``dtype`` at byte ``offset`` of ``path``, memory-mapped read-only
    (numpy cannot map zero bytes: an empty array then)."""
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(
        path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r", offset=offset, shape=(count,)
    )


def _read_header(idx_path: Path, size: int) -> tuple[int, int, int]:
    """The dtype code and the sequence and document counts of an ``.idx`` header, checked
    against the format and the file's ``size``."""
    with open(idx_path, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise _corrupt(idx_path, f"{size} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, code, sequences, documents = _HEADER.unpack(head)
    if magic != INDEX_MAGIC:
        raise _corrupt(idx_path, f"bad magic {magic!r} (expected {INDEX_MAGIC!r})")
    if version != 1:
        raise _corrupt(idx_path, f"unknown version {version} (expected 1)")
    if code not in DTYPE_CODES:
        raise _corrupt(idx_path, f"unknown dtype code {code} (known: {sorted(DTYPE_CODES)})")
    need = _HEADER.size + 12 * sequences + 8 * documents
    if size < need or size not in (need, need + sequences):  # + sequence modes (multimodal)
        raise _corrupt(
            idx_path,
            f"the header counts {sequences} sequences and {documents} document indices, which "
            f"need {need} bytes (or {need + sequences} with sequence modes); the file has {size}",
        )
    return code, sequences, documents


def read_index(prefix: str | os.PathLike[str], *, check_bin: bool = True) -> MegatronIndex:
    """Memory-map ``prefix.idx`` after checking it.

    Args:
        prefix: The dataset's path prefix (``prefix.idx`` and ``prefix.bin``), or either file.
        check_bin: Also check that ``prefix.bin`` exists and holds exactly the bytes the last
            pointer and length say.

    Returns:
        The :class:`MegatronIndex`.

    Raises:
        FileNotFoundError: If ``prefix.idx`` (or, with ``check_bin``, ``prefix.bin``) is missing.
        ValueError: Naming the file and what is wrong: a bad magic or version, a dtype code we do
            not know, counts that do not fit the file's size, a first pointer that is not 0, or
            a ``.bin`` of another size.
    """
    idx_path, bin_path = index_paths(prefix)
    size = require_regular_file(idx_path)  # FileNotFoundError names the path
    code, sequences, documents = _read_header(idx_path, size)
    base = _HEADER.size
    lengths = _map(idx_path, np.int32, base, sequences)
    pointers = _map(idx_path, np.int64, base + 4 * sequences, sequences)
    doc_idx = _map(idx_path, np.int64, base + 12 * sequences, documents)
    index = MegatronIndex(idx_path, bin_path, DTYPE_CODES[code], lengths, pointers, doc_idx)
    if sequences:
        if int(pointers[0]) != 0:
            raise _corrupt(idx_path, f"the first sequence pointer is {int(pointers[0])}, not 0")
        last_len, last_ptr = int(lengths[-1]), int(pointers[-1])
        if last_len < 0 or last_ptr < 0 or last_ptr % index.dtype.itemsize:
            raise _corrupt(
                idx_path,
                f"the last sequence has length {last_len} at byte {last_ptr} "
                f"(itemsize {index.dtype.itemsize})",
            )
    if check_bin:
        expect = index.total_tokens * index.dtype.itemsize
        have = require_regular_file(bin_path)
        if have != expect:
            raise ValueError(
                f"{bin_path} holds {have} bytes, but {idx_path} says {expect} "
                "(last pointer + itemsize x last length): the pair does not match"
            )
    return index


def _document(i: int, doc: object, dt: np.dtype[Any]) -> npt.NDArray[Any]:
    """``documents[i]`` as a 1-D array of ``dt``, refused (named) if a value would change: a float
    token truncated, an id past the dtype's range wrapped."""
    try:
        given = np.asarray(doc)
    except ValueError:
        given = np.asarray(None)
    numbers = "iub" + ("f" if dt.kind == "f" else "")
    if given.ndim != 1 or (given.size and given.dtype.kind not in numbers):  # [] is float64
        raise ValueError(
            f"documents[{i}] must be a 1-D sequence of {dt} values; got {type(doc).__name__} "
            f"of shape {given.shape}, dtype {given.dtype}"
        )
    if given.size and dt.kind in "iu" and given.dtype.kind in "iu":
        info = np.iinfo(dt)
        low, high = int(given.min()), int(given.max())
        if low < info.min or high > info.max:
            raise ValueError(
                f"documents[{i}] must hold ids in [{info.min}, {info.max}] (dtype {dt}); "
                f"got values in [{low}, {high}]"
            )
    return given.astype(dt)


def write_megatron(
    prefix: str | os.PathLike[str],
    documents: Iterable[npt.ArrayLike],
    *,
    dtype: npt.DTypeLike = np.int32,
) -> tuple[Path, Path]:
    """Write ``prefix.bin`` and ``prefix.idx`` in megatron-core's format, one sequence (and one
    document) per item of ``documents``. A test and benchmark helper, not a tokenizer pipeline.

    Args:
        prefix: The path prefix to write.
        documents: Token arrays (or sequences of ints), one per document; empty ones are allowed.
        dtype: The token dtype, one of :data:`DTYPE_CODES` (default int32).

    Returns:
        ``(idx_path, bin_path)``.

    Raises:
        ValueError: If ``dtype`` has no Megatron code, a document is not 1-D, or is longer than
            an int32 length.
    """
    try:
        dt = None if dtype is None else np.dtype(dtype)  # np.dtype(None) is float64
    except TypeError:
        dt = None
    codes = {v: k for k, v in DTYPE_CODES.items()}
    if dt is None or dt not in codes:
        raise ValueError(
            f"dtype must be one of {', '.join(str(d) for d in DTYPE_CODES.values())}; "
            f"got dtype={dtype!r}"
        )
    if isinstance(documents, str | bytes) or not isinstance(documents, Iterable):
        raise TypeError(
            f"documents must be an iterable of token arrays; got {type(documents).__name__}"
        )
    idx_path, bin_path = index_paths(prefix)
    lengths: list[int] = []
    with open(bin_path, "wb") as out:
        for i, doc in enumerate(documents):
            arr = _document(i, doc, dt)
            if arr.shape[0] > 2**31 - 1:
                raise ValueError(f"documents[{i}] must hold < 2**31 tokens; got {arr.shape[0]}")
            out.write(arr.tobytes())
            lengths.append(int(arr.shape[0]))
    lens = np.array(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lens[:-1].astype(np.int64) * dt.itemsize, out=pointers[1:])
    doc_idx = np.arange(len(lengths) + 1, dtype=np.int64)
    with open(idx_path, "wb") as out:
        out.write(_HEADER.pack(INDEX_MAGIC, 1, codes[dt], len(lengths), len(doc_idx)))
        out.write(lens.astype("<i4").tobytes())
        out.write(pointers.astype("<i8").tobytes())
        out.write(doc_idx.astype("<i8").tobytes())
    return idx_path, bin_path
