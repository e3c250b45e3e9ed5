"""A packed row into training tensors: :class:`PackedDataset` and its ``collate``.

A row is a tuple of ``(document, start, stop)`` spans (:mod:`dataorder.llm.packing.plan`), the
padding row is ``()``. ``dataset[row]`` reads the spans' tokens from a token source and lays them
out in ``seq_len`` slots, span after span, padding at the end. With the sampler that yields
micro-batches of rows, ``DataLoader(dataset, batch_sampler=sampler,
collate_fn=PackedDataset.collate)``. What the dict holds is the dataset's style
(:mod:`~dataorder.llm.packing.batch_styles`): Hugging Face's by default (below), or Megatron-LM's
with ``style="megatron"`` (NOTE [ Megatron rows ]).

NOTE [ Packed labels ]
    ``labels`` are unshifted, as Hugging Face models expect them: the model predicts
    ``labels[i + 1]`` from the tokens up to ``i`` (it shifts them itself). ``labels`` equals
    ``input_ids`` except ``-100`` (ignored by the loss) on padding and on the *first token of
    every span*. After the shift, the prediction made at the last token of a span would be the
    first token of the next span, another document (or another part of a split one, whose context
    is in another row): that label is -100, so no prediction crosses a document boundary and none
    is made without its document's context. Positions restart at 0 at every span, and attention
    must be kept inside spans: through ``document_ids`` (a block-diagonal or flex-attention mask)
    or ``cu_seqlens`` (FlashAttention's variable-length kernels).

Example (``seq_len=8``, two documents ``[10, 11, 12]`` and ``[20, 21, 22, 23]``, the row
``((1, 1, 4), (0, 0, 3))``)::

    input_ids     21  22  23  10  11  12   0   0
    position_ids   0   1   2   0   1   2   0   0
    document_ids   0   0   0   1   1   1  -1  -1
    labels      -100  22  23 -100 11  12 -100 -100

and ``collate`` of that one row adds ``cu_seqlens = [0, 3, 6, 8]`` (the padding is a segment of
its own) and ``max_seqlen = 3``.

torch is imported only when tensors are made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.llm.packing.arrow_columns import ListColumn, list_column
from dataorder.llm.packing.batch_styles import (
    IGNORE_INDEX,
    HFStyle,
    MegatronStyle,
    RowLayout,
    batch_style,
)
from dataorder.llm.packing.megatron_files import read_index
from dataorder.llm.packing.plan import MAX_SEQ_LEN

__all__ = [
    "IGNORE_INDEX",
    "ArrowTokens",
    "ConcatTokens",
    "DocumentRange",
    "MegatronTokens",
    "PackedDataset",
    "SequenceTokens",
    "TokenSource",
]


@runtime_checkable
class TokenSource(Protocol):
    """Where the tokens of documents are read: a number of documents, each one's length, and a
    slice of its tokens."""

    def __len__(self) -> int: ...

    def length(self, document: int) -> int:
        """Tokens in ``document``."""
        ...

    def tokens(self, document: int, start: int, stop: int) -> npt.NDArray[Any]:
        """Tokens ``[start, stop)`` of ``document`` (bounds already checked)."""
        ...


class SequenceTokens:
    """A token source over a sequence of token sequences (lists or 1-D arrays), in memory."""

    def __init__(self, documents: Sequence[Any]) -> None:
        self.documents = documents

    def __len__(self) -> int:
        return len(self.documents)

    def length(self, document: int) -> int:
        return len(self.documents[document])

    def tokens(self, document: int, start: int, stop: int) -> npt.NDArray[Any]:
        return np.asarray(self.documents[document][start:stop])


class MegatronTokens:
    """A token source over a Megatron indexed dataset: the ``.bin`` memory-mapped, sequences
    located through the ``.idx`` pointers (:mod:`dataorder.llm.packing.megatron_files`)."""

    def __init__(self, prefix: str | os.PathLike[str]) -> None:
        self.prefix = os.fspath(prefix)
        self.index = read_index(prefix)
        if self.index.dtype.kind not in "iu":  # Megatron's float codes are not token ids
            raise ValueError(
                f"{self.index.idx_path} holds {self.index.dtype} values, not token ids (an "
                "integer dtype); PackedDataset reads token ids"
            )
        self._bin = self.index.tokens()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # reopened by path in a spawned DataLoader worker: pickling the maps would copy the files
        return MegatronTokens, (self.prefix,)

    def __len__(self) -> int:
        return self.index.num_sequences

    def length(self, document: int) -> int:
        return int(self.index.sequence_lengths[document])

    def tokens(self, document: int, start: int, stop: int) -> npt.NDArray[Any]:
        first, _ = self.index.sequence_span(document)
        return np.asarray(self._bin[first + start : first + stop])


class ArrowTokens:
    """A token source over a list column of an HF dataset or a pyarrow table: one row sliced
    per span (zero-copy where Arrow allows), never the whole column."""

    def __init__(self, data: Any, column: str = "input_ids") -> None:
        self._args = (data, column)
        self.column: ListColumn = list_column(data, column)
        self._lengths = self.column.lengths()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # an HF dataset pickles as a reference to its cache files; the column is rebuilt from it
        return ArrowTokens, self._args

    def __len__(self) -> int:
        return len(self.column)

    def length(self, document: int) -> int:
        return int(self._lengths[document])

    def tokens(self, document: int, start: int, stop: int) -> npt.NDArray[Any]:
        return self.column.row(document, start, stop)


class ConcatTokens:
    """Token sources end to end: document ``i`` of source ``d`` is the flat document
    ``sum(len(sources[:d])) + i``, the numbering of a
    :class:`~dataorder.llm.packing.sampler.PackedSampler` blend's rows.

    >>> both = ConcatTokens([SequenceTokens([[1, 2]]), SequenceTokens([[3], [4, 5, 6]])])
    >>> len(both), both.length(2), both.tokens(2, 1, 3).tolist()
    (3, 3, [5, 6])
    """

    def __init__(self, sources: Sequence[TokenSource]) -> None:
        given: object = sources
        if isinstance(given, str | bytes) or not isinstance(given, Sequence) or not given:
            fail("sources", "a non-empty sequence of token sources", sources, TypeError)
        for d, source in enumerate(given):
            if not isinstance(source, TokenSource):
                fail(f"sources[{d}]", "a TokenSource", type(source).__name__, TypeError)
        self.sources: list[TokenSource] = list(given)
        self.starts = np.cumsum([0] + [len(x) for x in self.sources]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _find(self, document: int) -> tuple[TokenSource, int]:
        d = int(np.searchsorted(self.starts, document, side="right")) - 1
        return self.sources[d], document - int(self.starts[d])

    def length(self, document: int) -> int:
        source, local = self._find(document)
        return source.length(local)

    def tokens(self, document: int, start: int, stop: int) -> npt.NDArray[Any]:
        source, local = self._find(document)
        return source.tokens(local, start, stop)


class DocumentRange:
    """Documents ``[start, stop)`` of another token source, renumbered from 0: the tokens of a
    split (train, valid, test) packed over that range of a corpus's documents
    (:func:`~dataorder.llm.splits.split_documents`).

    >>> valid = DocumentRange(SequenceTokens([[1], [2, 3], [4, 5, 6]]), 1, 3)
    >>> len(valid), valid.length(1), valid.tokens(0, 0, 2).tolist()
    (2, 3, [2, 3])
    """

    def __init__(self, source: TokenSource, start: int, stop: int) -> None:
        if not isinstance(source, TokenSource):
            fail("source", "a TokenSource", type(source).__name__, TypeError)
        n = len(source)
        self.start = check_int("start", start, min_value=0, max_value=n)
        self.stop = check_int("stop", stop, min_value=self.start, max_value=n)
        self.source = source

    def __len__(self) -> int:
        return self.stop - self.start

    def length(self, document: int) -> int:
        return self.source.length(self.start + document)

    def tokens(self, document: int, start: int, stop: int) -> npt.NDArray[Any]:
        return self.source.tokens(self.start + document, start, stop)


class PackedDataset:
    """Rows of ``(document, start, stop)`` spans into tensors of ``seq_len`` tokens.

    Args:
        token_source: A :class:`TokenSource`, or a sequence of token sequences (wrapped in
            :class:`SequenceTokens`).
        seq_len: Tokens per row, an int in ``[1, 2**31]``.
        pad_id: The token id of padding slots (with ``style="megatron"``, a valid token id: the
            embedding reads it).
        style: ``"hf"`` (default), ``"megatron"`` or a
            :class:`~dataorder.llm.packing.batch_styles.MegatronStyle` (its options: attention
            fields, position reset, ``eod_mask_loss``).

    With ``style="hf"``, ``dataset[row]`` returns a dict of 1-D tensors of length ``seq_len``:
    ``input_ids`` (int64, padded with ``pad_id``), ``position_ids`` (int64, restarting at 0 at
    every span, 0 on padding), ``document_ids`` (int32, the span's ordinal in the row, -1 on
    padding) and ``labels`` (int64, NOTE [ Packed labels ]). With ``style="megatron"``, what
    Megatron-LM's ``get_batch`` takes: ``tokens``, ``labels`` (shifted), ``loss_mask``,
    ``position_ids`` and the attention fields (NOTE [ Megatron rows ] in
    :mod:`~dataorder.llm.packing.batch_styles`).

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``seq_len`` is out of range; from ``dataset[row]``, if the row does not
            match the source (a document out of range, a span outside its document, or more
            than ``seq_len`` tokens), naming the row.
    """

    def __init__(
        self,
        token_source: TokenSource | Sequence[Any],
        seq_len: int,
        *,
        pad_id: int = 0,
        style: str | HFStyle | MegatronStyle = "hf",
    ):
        if not isinstance(token_source, TokenSource):
            if isinstance(token_source, str | bytes) or not isinstance(token_source, Sequence):
                fail(
                    "token_source",
                    "a TokenSource or a sequence of token sequences",
                    type(token_source).__name__,
                    TypeError,
                )
            token_source = SequenceTokens(token_source)
        if len(token_source) < 1:
            fail("token_source", "at least one document", "<no documents>")
        self.source: TokenSource = token_source
        self.seq_len = check_int("seq_len", seq_len, min_value=1, max_value=MAX_SEQ_LEN)
        self.pad_id = check_int("pad_id", pad_id, min_value=-(2**63), max_value=2**63 - 1)
        self.style: HFStyle | MegatronStyle = batch_style(style)
        if isinstance(self.style, MegatronStyle) and self.pad_id < 0:
            # Megatron's model embeds every slot, padding too (GPTDataset maps its pad to 0)
            fail("pad_id", "a token id >= 0 with a Megatron style (padding is embedded)", pad_id)

    @classmethod
    def from_megatron(
        cls,
        prefix: str | os.PathLike[str],
        seq_len: int,
        *,
        pad_id: int = 0,
        style: str | HFStyle | MegatronStyle = "hf",
    ) -> PackedDataset:
        """Tokens from a Megatron indexed dataset (``prefix.idx`` / ``prefix.bin``)."""
        return cls(MegatronTokens(prefix), seq_len, pad_id=pad_id, style=style)

    @classmethod
    def from_arrow(
        cls,
        data: Any,
        seq_len: int,
        *,
        column: str = "input_ids",
        pad_id: int = 0,
        style: str | HFStyle | MegatronStyle = "hf",
    ) -> PackedDataset:
        """Tokens from the list column ``column`` of an HF dataset or a pyarrow table."""
        return cls(ArrowTokens(data, column), seq_len, pad_id=pad_id, style=style)

    def __repr__(self) -> str:
        return (
            f"PackedDataset({len(self.source)} documents, seq_len={self.seq_len}, "
            f"pad_id={self.pad_id})"
        )

    def arrays(self, row: Sequence[tuple[int, int, int]]) -> dict[str, npt.NDArray[Any]]:
        """``dataset[row]`` as numpy arrays (no torch)."""
        return self.style.arrays(self.layout(row))

    def layout(self, row: Sequence[tuple[int, int, int]]) -> RowLayout:
        """The row's tokens in its ``seq_len`` slots (checked against the source)."""
        spans = self._check(row)
        s = self.seq_len
        ids = np.full(s, self.pad_id, dtype=np.int64)
        pos = np.zeros(s, dtype=np.int64)
        doc = np.full(s, -1, dtype=np.int32)
        ends: list[int] = []
        after: list[int | None] = []
        at = 0
        for k, (d, a, b) in enumerate(spans):
            n = b - a
            more = self.style.reads_next and b < self.source.length(d)
            tokens = self._token_ids(d, a, b + 1 if more else b)
            ids[at : at + n] = tokens[:n]
            pos[at : at + n] = np.arange(n)
            doc[at : at + n] = k
            at += n
            ends.append(at)
            after.append(int(tokens[n]) if more else None)
        return RowLayout(ids, pos, doc, tuple(ends), tuple(after), self.pad_id)

    def _token_ids(self, d: int, a: int, b: int) -> npt.NDArray[Any]:
        """Tokens ``[a, b)`` of document ``d``, checked to be ``b - a`` int64 token ids (a float
        or an unsigned id past int64 would be cast silently into another id)."""
        tokens = np.asarray(self.source.tokens(d, a, b))
        what = f"tokens [{a}, {b}) of document {d}"
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"{what} must be integer token ids; got an array of {tokens.dtype}")
        if tokens.shape != (b - a,):
            raise ValueError(f"{what} must be {b - a} token ids; got an array of {tokens.shape}")
        if tokens.dtype.kind == "u" and tokens.size and int(tokens.max()) > 2**63 - 1:
            raise ValueError(f"{what} must be token ids below 2**63; got {int(tokens.max())}")
        return tokens

    def __getitem__(self, row: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
        import torch

        return {k: torch.from_numpy(v) for k, v in self.arrays(row).items()}

    def _check(self, row: object) -> list[tuple[int, int, int]]:
        if not isinstance(row, tuple | list):
            fail("row", "a tuple of (document, start, stop) spans", row, TypeError)
        spans: list[tuple[int, int, int]] = []
        total = 0
        n_docs = len(self.source)
        for span in row:
            if not (isinstance(span, tuple | list) and len(span) == 3):
                fail("row", "a tuple of (document, start, stop) spans", row, TypeError)
            try:
                d, a, b = (check_int("span", v) for v in span)
            except TypeError:
                fail("row", "a tuple of (document, start, stop) spans of ints", row, TypeError)
            if not 0 <= d < n_docs:
                fail("row", f"spans of documents in [0, {n_docs - 1}]", row)
            if not 0 <= a < b <= self.source.length(d):
                fail(
                    "row",
                    f"spans with 0 <= start < stop <= the document's length "
                    f"({self.source.length(d)} for document {d})",
                    row,
                )
            total += b - a
            spans.append((d, a, b))
        if total > self.seq_len:
            fail("row", f"at most seq_len={self.seq_len} tokens (it has {total})", row)
        return spans

    @staticmethod
    def collate(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Stack a micro-batch of ``dataset[row]`` dicts into ``(B, seq_len)`` tensors.

        Items of the ``"hf"`` style also get the FlashAttention variable-length fields over the
        flattened ``B * seq_len`` tokens:

        * ``cu_seqlens`` (int32, 1-D): the start of every segment and the end of the last. A
          segment is a span, or a row's padding (one segment of its own, so the segments cover
          every token of the flattened ``input_ids`` and the kernel's output keeps its shape;
          padding attends only to padding and its labels are -100);
        * ``max_seqlen`` (a Python int): the longest segment.

        Items of a Megatron style (they hold ``tokens``) are stacked by
        :meth:`~dataorder.llm.packing.batch_styles.MegatronStyle.collate` (with ``cu_seqlens``:
        ``packed_seq_params`` added); :attr:`collate_fn` is the dataset's own.

        Raises:
            ValueError: If ``items`` is empty or of several ``seq_len``.
            TypeError: If an item is not a ``dataset[row]`` dict.
        """
        if items and isinstance(items[0], Mapping) and "tokens" in items[0]:
            first = items[0]
            attention = (
                "thd"
                if "cu_seqlens" in first
                else "mask"
                if "attention_mask" in first
                else "causal"
            )
            return MegatronStyle(attention=attention).collate(items)  # type: ignore[arg-type]
        return HFStyle().collate(items)

    @property
    def collate_fn(self) -> Any:
        """The ``collate`` of this dataset's style: ``DataLoader(ds, collate_fn=ds.collate_fn)``."""
        return self.style.collate
