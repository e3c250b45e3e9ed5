"""List columns of Arrow data (HF ``datasets``, pyarrow tables): lengths and rows, no decoding.

A tokenized column is an Arrow list column: one flat buffer of every token and an offsets buffer
(``offsets[i]`` tokens precede row ``i``), per chunk. Lengths come from the offsets, and a row is
a zero-copy slice of the values; no row is converted to Python objects.

A null row (a missing list) is a document of no tokens, like an empty list: it packs into nothing
and is counted (``documents_empty``). A null *token id* inside a list is refused when its row is
read.

NOTE [ Null rows ]
    Arrow lets a null row's offsets span values (``ListArray.from_arrays([0, 3, 8], values,
    mask=[False, True])`` is valid: row 1 is null over values 3 to 7, which no reader may see).
    So a length is the offsets' difference only where the row is valid, 0 where it is null, and
    the offsets serve as cumulative counts only when no null row spans a value. A null row's
    tokens are never read.

An HF :class:`datasets.Dataset` is an Arrow table plus, after ``select``/``shuffle``/``filter``,
an *indices mapping* (row ``i`` of the dataset is row ``indices[i]`` of the table). With a
mapping, the offsets are not in the dataset's order: lengths are gathered through the mapping and
there are no cumulative counts. ``datasets`` keeps the mapping in ``Dataset._indices``, a private
attribute it has kept since its first releases; the table is the public ``Dataset.data``.

pyarrow is imported lazily (``pip install 'dataorder[arrow]'``); nothing here imports
``datasets``: a dataset is recognised by its attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ListColumn", "integer_column", "list_column", "require_pyarrow"]


def require_pyarrow() -> Any:
    """Import and return ``pyarrow``, or raise ImportError saying how to install it."""
    try:
        import pyarrow
    except ImportError as err:
        raise ImportError(
            "Arrow data needs pyarrow, which is not installed; "
            "install it with: pip install 'dataorder[arrow]'"
        ) from err
    return pyarrow


@dataclass(frozen=True)
class ListColumn:
    """A list column, ready for lengths and row slices.

    Attributes:
        chunks: The column's chunks (pyarrow ``ListArray``/``LargeListArray``), in order.
        starts: int64, ``chunks`` + 1 entries: table row where each chunk starts.
        mapping: The dataset's indices mapping (int64 rows of the table), or None.
        name: The column's name, for messages.
    """

    chunks: tuple[Any, ...]
    starts: npt.NDArray[np.int64]
    mapping: npt.NDArray[np.int64] | None
    name: str = "input_ids"

    def __len__(self) -> int:
        return int(self.starts[-1]) if self.mapping is None else int(self.mapping.shape[0])

    def offsets(self) -> npt.NDArray[Any] | None:
        """The one chunk's offsets (``len + 1`` entries, zero-copy), when the column is one
        chunk with no mapping and no null row spans a value (NOTE [ Null rows ]): cumulative
        token counts for free. None otherwise."""
        if self.mapping is not None or len(self.chunks) != 1:
            return None
        chunk = self.chunks[0]
        offsets = _offsets(chunk)
        if chunk.null_count and np.diff(offsets)[_nulls(chunk)].any():
            return None
        return offsets

    def lengths(self) -> npt.NDArray[np.int64]:
        """Every row's length, int64, 0 for a null row (one vectorised pass over the offsets)."""
        per_chunk = [_lengths(c) for c in self.chunks]
        base = np.concatenate(per_chunk) if per_chunk else np.zeros(0, dtype=np.int64)
        return base if self.mapping is None else base[self.mapping]

    def row(self, i: int, start: int, stop: int) -> npt.NDArray[Any]:
        """Tokens ``[start, stop)`` of row ``i`` as a numpy array (a zero-copy view where the
        values allow it). The caller has checked the bounds."""
        table_row = i if self.mapping is None else int(self.mapping[i])
        k = int(np.searchsorted(self.starts, table_row, side="right")) - 1
        chunk = self.chunks[k]
        at = table_row - int(self.starts[k])
        if stop > start and not chunk[at].is_valid:  # its offsets may span hidden values
            raise ValueError(
                f"row {i} of column {self.name!r} is null (no tokens); got tokens [{start}, {stop})"
            )
        first = int(_offsets(chunk)[at])
        values = chunk.values.slice(first + start, stop - start)
        if values.null_count:  # to_numpy would turn them into floats (NaN), then into garbage ids
            raise ValueError(
                f"row {i} of column {self.name!r} holds {values.null_count} null token ids in "
                f"tokens [{start}, {stop}); a token id is an int"
            )
        return np.asarray(values.to_numpy(zero_copy_only=False))


def _offsets(chunk: Any) -> npt.NDArray[Any]:
    """A chunk's ``len + 1`` offsets into its values (a sliced chunk's own, zero-copy)."""
    return np.asarray(chunk.offsets.to_numpy(zero_copy_only=False))


def _nulls(chunk: Any) -> npt.NDArray[np.bool_]:
    """Which rows of a chunk are null (a sliced chunk's own)."""
    return np.asarray(chunk.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _lengths(chunk: Any) -> npt.NDArray[np.int64]:
    """A chunk's row lengths, 0 for a null row (NOTE [ Null rows ])."""
    out = np.diff(_offsets(chunk)).astype(np.int64)
    if chunk.null_count:
        out[_nulls(chunk)] = 0
    return out


def list_column(data: Any, column: str) -> ListColumn:
    """The list column ``column`` of an HF dataset, a pyarrow Table, or a pyarrow (chunked)
    list array (``column`` is then ignored).

    Raises:
        ImportError: If pyarrow is missing.
        TypeError: If ``data`` is none of those, or the column is not a list column.
        ValueError: If the table has no such column (the message lists the columns).
    """
    pa = require_pyarrow()
    data, mapping = _table_and_mapping(data)
    if isinstance(data, pa.Table):
        if column not in data.column_names:
            raise ValueError(
                f"column must name a column of the table; got column={column!r} "
                f"(columns: {', '.join(data.column_names)})"
            )
        data = data.column(column)
    if isinstance(data, pa.Array):
        data = pa.chunked_array([data], type=data.type)
    if not isinstance(data, pa.ChunkedArray):
        raise TypeError(
            "data must be an HF datasets.Dataset, a pyarrow Table, or a pyarrow list array; "
            f"got data={type(data).__name__}"
        )
    is_list = pa.types.is_list(data.type) or pa.types.is_large_list(data.type)
    if not is_list or not pa.types.is_integer(data.type.value_type):
        raise TypeError(
            f"column must be a list column of integer token ids; got column={column!r} "
            f"of type {data.type}"
        )
    chunks = tuple(c for c in data.chunks if len(c))
    sizes = np.array([len(c) for c in chunks], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return ListColumn(chunks, starts, mapping, str(column))


def _table_and_mapping(data: Any) -> tuple[Any, npt.NDArray[np.int64] | None]:
    """An HF dataset's pyarrow Table and indices mapping (or None); anything else as given."""
    mapping = None
    if hasattr(data, "_indices") and hasattr(data, "data") and hasattr(data, "column_names"):
        indices = data._indices  # None, or a one-column table of uint64 rows
        if indices is not None:
            mapping = np.asarray(indices.column(0).to_numpy(), dtype=np.int64)
        data = data.data
        data = getattr(data, "table", data)  # datasets' Table wrapper holds a pyarrow Table
    return data, mapping


def integer_column(data: Any, column: str) -> npt.NDArray[Any]:
    """The integer column ``column`` of an HF dataset (through its indices mapping) or a
    pyarrow Table, as a numpy array read from the Arrow buffers (no row decoded; a column of
    several chunks is copied once).

    Raises:
        TypeError: If the column is not integers (a list column names ``from_arrow``).
        ValueError: If the table has no such column, or the column holds nulls.
    """
    pa = require_pyarrow()
    table, mapping = _table_and_mapping(data)
    if column not in table.column_names:
        raise ValueError(
            f"column must name a column of the table; got column={column!r} "
            f"(columns: {', '.join(table.column_names)})"
        )
    col = table.column(column)
    if not pa.types.is_integer(col.type):
        raise TypeError(
            f"lengths must be an integer column; got column {column!r} of type {col.type} "
            "(for a list column of token ids, use DocumentLengths.from_arrow(data, column))"
        )
    if col.null_count:
        raise ValueError(
            f"lengths must be ints; got column {column!r} with {col.null_count} null values"
        )
    values = np.asarray(col.to_numpy())
    return values if mapping is None else values[mapping]
