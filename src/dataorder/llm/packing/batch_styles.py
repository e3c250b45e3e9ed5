"""How a packed row becomes training tensors: the batch styles of :class:`~dataorder.llm.packing.
dataset.PackedDataset`.

A style is chosen once, at construction (``PackedDataset(..., style="hf" | "megatron" |
MegatronStyle(...))``), and turns a :class:`RowLayout` (the row's tokens laid out in
``seq_len`` slots) into the arrays of one item; its ``collate`` stacks a micro-batch of items.

* :class:`HFStyle` (``"hf"``): ``input_ids`` and unshifted ``labels`` (the model shifts), as
  Hugging Face models take them (NOTE [ Packed labels ] in :mod:`~dataorder.llm.packing.dataset`).
* :class:`MegatronStyle` (``"megatron"``): what Megatron-LM's ``get_batch`` and megatron-core's
  ``GPTModel.forward`` take (NOTE [ Megatron rows ]).

NOTE [ Megatron rows ]
    Megatron shifts in the dataset: ``GPTDataset`` reads ``seq_length + 1`` tokens and returns
    ``tokens = text[:-1]``, ``labels = text[1:]``, with ``loss_mask``, ``position_ids`` and
    (``--create-attention-mask-in-dataloader``) an ``attention_mask`` of shape ``(1, S, S)``,
    ``True`` where attention is masked. :class:`MegatronStyle` returns the same keys for a
    packed row:

    * ``labels[i]`` is the token after ``tokens[i]``: inside a span the row's next token; at the
      last slot of a span that stops before its document's end, the document's next token (read
      from the source: a split document's every token but its first is predicted once, as in
      ``GPTDataset``); elsewhere the row's next token (or ``pad_id`` at the row's end), which
      the loss ignores.
    * ``loss_mask`` (float32) is 1 where the label is the next token *of the same document*: 0
      at the last token of every document (its label would be another document's) and on
      padding; with ``eod_mask_loss`` also 0 wherever ``tokens == eod``, as Megatron's
      ``--eod-mask-loss`` (the prediction made *from* an EOD; the EOD's own prediction is kept).
    * ``position_ids`` restart at 0 at every span (``--reset-position-ids``; a row's padding is
      a segment of its own), or run ``0 .. S - 1`` with ``reset_position_ids=False``.
    * Attention (``attention=``): ``"thd"`` adds ``cu_seqlens`` (int32, the row's segment
      boundaries ``0, ..., S`` right-padded with ``S`` to ``S + 1`` entries) and ``max_seqlen``
      (int32 scalar), the per-sample fields Megatron-LM's ``get_batch`` merges over a
      micro-batch under ``--dataloader-inter-document-masking`` and hands to
      ``PackedSeqParams(qkv_format="thd")``; :meth:`MegatronStyle.collate` also builds that
      ``PackedSeqParams`` over the micro-batch flattened to one stream. ``"mask"`` adds the
      block-diagonal causal ``attention_mask`` of ``--reset-attention-mask`` (at span
      boundaries, where Megatron resets at EOD tokens): ``S * S`` bytes per row, 64 MiB at
      ``S = 8192``, as Megatron's own; prefer ``"thd"`` for long rows. ``"causal"`` adds
      neither: the model's own causal mask, across documents, as ``GPTDataset`` without the
      reset flags.

    On one document the item equals ``GPTDataset``'s for the same tokens; a row of documents
    that each end with EOD equals ``GPTDataset``'s sample of them under ``--reset-position-ids
    --reset-attention-mask --eod-mask-loss`` (tests/llm/packing/test_megatron_style.py, against
    megatron-core).

Example (``seq_len=8``, documents ``[10, 11, 12]`` and ``[20, 21, 22, 23]``, the row
``((1, 1, 4), (0, 0, 2))``: document 0 is cut after 2 of its 3 tokens)::

    tokens        21  22  23  10  11   0   0   0
    labels        22  23  10  11  12   0   0   0
    loss_mask      1   1   0   1   1   0   0   0
    position_ids   0   1   2   0   1   0   1   2
    cu_seqlens     0   3   5   8   8   8   8   8   8
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_choice, check_int, fail

__all__ = [
    "IGNORE_INDEX",
    "MEGATRON_ATTENTION",
    "BatchStyle",
    "HFStyle",
    "MegatronStyle",
    "RowLayout",
    "batch_style",
    "packed_seq_params",
]

#: The label the loss ignores (torch's ``CrossEntropyLoss`` default ``ignore_index``).
IGNORE_INDEX = -100

#: The ``attention=`` values of :class:`MegatronStyle`.
MEGATRON_ATTENTION: tuple[str, ...] = ("thd", "mask", "causal")

Arrays = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class RowLayout:
    """A row's tokens laid out in its ``seq_len`` slots, span after span, padding last.

    Attributes:
        input_ids: int64, the tokens (``pad_id`` on padding).
        position_ids: int64, 0 at every span's first slot, 0 on padding.
        document_ids: int32, the span's ordinal in the row, -1 on padding.
        ends: The slot after each span's last token.
        after: Per span, the document's token after the span, or None at the document's end
            (read only for a style with ``reads_next``).
        pad_id: The padding token.
    """

    input_ids: npt.NDArray[np.int64]
    position_ids: npt.NDArray[np.int64]
    document_ids: npt.NDArray[np.int32]
    ends: tuple[int, ...]
    after: tuple[int | None, ...]
    pad_id: int


class BatchStyle(Protocol):
    """A batch style: a :class:`RowLayout` into one item's arrays, and a micro-batch's collate."""

    #: Whether :meth:`arrays` needs :attr:`RowLayout.after` (one more token read per span).
    reads_next: bool
    #: The keys of every item (``collate`` checks them).
    keys: tuple[str, ...]

    def arrays(self, row: RowLayout) -> Arrays:
        """One item's arrays."""
        ...

    def collate(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """A micro-batch of items (tensors) stacked."""
        ...


def _check_items(items: Sequence[Mapping[str, Any]], keys: tuple[str, ...], what: str) -> None:
    if not items:
        fail("items", "a non-empty micro-batch", list(items))
    shapes = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not all(k in item for k in keys):
            fail(f"items[{i}]", f"a dict of {', '.join(keys)} ({what})", item, TypeError)
        shapes.add(tuple(tuple(getattr(item[k], "shape", ())) for k in keys))
    if len(shapes) != 1:
        fail("items", "rows of one seq_len (dataset[row] of one PackedDataset)", sorted(shapes))


@dataclass(frozen=True)
class HFStyle:
    """``input_ids``, ``position_ids``, ``document_ids`` and unshifted ``labels`` (NOTE [ Packed
    labels ] in :mod:`~dataorder.llm.packing.dataset`)."""

    reads_next: ClassVar[bool] = False
    keys: ClassVar[tuple[str, ...]] = ("input_ids", "position_ids", "document_ids", "labels")

    def arrays(self, row: RowLayout) -> Arrays:
        """The row's ``input_ids``, ``position_ids``, ``document_ids`` and unshifted ``labels``
        (-100 on padding and at every span's first token; NOTE [ Packed labels ])."""
        labels = row.input_ids.copy()
        labels[row.document_ids < 0] = IGNORE_INDEX
        labels[row.position_ids == 0] = IGNORE_INDEX  # the first token of every span (and padding)
        return {
            "input_ids": row.input_ids,
            "position_ids": row.position_ids,
            "document_ids": row.document_ids,
            "labels": labels,
        }

    def collate(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Stack ``(B, seq_len)`` tensors and add ``cu_seqlens``/``max_seqlen`` over the flattened
        ``B * seq_len`` tokens (:meth:`~dataorder.llm.packing.dataset.PackedDataset.collate`)."""
        import torch

        _check_items(items, self.keys, "dataset[row]")
        out: dict[str, Any] = {k: torch.stack([item[k] for item in items]) for k in items[0]}
        doc = out["document_ids"]
        b, s = doc.shape
        starts = torch.ones(b, s, dtype=torch.bool)
        starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
        edges = torch.nonzero(starts.reshape(-1)).reshape(-1)
        cu = torch.cat([edges, torch.tensor([b * s])]).to(torch.int32)
        out["cu_seqlens"] = cu
        out["max_seqlen"] = int((cu[1:] - cu[:-1]).max())
        return out


@dataclass(frozen=True)
class MegatronStyle:
    """Megatron-LM's batch format (NOTE [ Megatron rows ]).

    Args:
        attention: ``"thd"`` (``cu_seqlens``, ``max_seqlen``), ``"mask"`` (a block-diagonal
            ``attention_mask``, ``--reset-attention-mask``) or ``"causal"`` (neither).
        reset_position_ids: Restart ``position_ids`` at every span (``--reset-position-ids``).
        eod_mask_loss: Zero ``loss_mask`` wherever ``tokens == eod`` (``--eod-mask-loss``).
        eod: The end-of-document token id (needed by ``eod_mask_loss``).

    Raises:
        TypeError, ValueError: For a bad argument, naming it.

    >>> MegatronStyle(eod_mask_loss=True, eod=2).keys
    ('tokens', 'labels', 'loss_mask', 'position_ids', 'cu_seqlens', 'max_seqlen')
    """

    attention: Literal["thd", "mask", "causal"] = "thd"
    reset_position_ids: bool = True
    eod_mask_loss: bool = False
    eod: int | None = None

    reads_next: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_choice("attention", self.attention, MEGATRON_ATTENTION)
        check_bool("reset_position_ids", self.reset_position_ids)
        check_bool("eod_mask_loss", self.eod_mask_loss)
        if self.eod is not None:
            check_int("eod", self.eod, min_value=0, max_value=2**63 - 1)
        elif self.eod_mask_loss:
            fail("eod", "the end-of-document token id with eod_mask_loss=True", None)

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys of an item."""
        extra = {"thd": ("cu_seqlens", "max_seqlen"), "mask": ("attention_mask",), "causal": ()}
        return ("tokens", "labels", "loss_mask", "position_ids", *extra[self.attention])

    def arrays(self, row: RowLayout) -> Arrays:
        """The row in Megatron-LM's format: ``tokens``, the next token as ``labels``,
        ``loss_mask`` (0 on padding and where a label would be another document's),
        ``position_ids`` reset per document, and the attention keys :attr:`attention` asks."""
        ids, doc = row.input_ids, row.document_ids
        s = ids.size
        labels = np.empty(s, dtype=np.int64)
        labels[:-1] = ids[1:]
        labels[-1] = row.pad_id
        same = np.zeros(s, dtype=bool)  # the label is the same document's next token
        same[:-1] = (doc[1:] == doc[:-1]) & (doc[:-1] >= 0)
        for end, token in zip(row.ends, row.after, strict=True):
            if token is not None:
                labels[end - 1] = token
                same[end - 1] = True
        loss_mask = same.astype(np.float32)
        if self.eod_mask_loss:
            loss_mask[ids == self.eod] = 0.0
        # segments: each span, then the padding (if any) as one more
        starts = np.zeros(s, dtype=bool)
        starts[0] = True
        starts[1:] = doc[1:] != doc[:-1]
        first = np.flatnonzero(starts)
        if self.reset_position_ids:
            lengths = np.diff(np.append(first, s))
            positions = np.arange(s, dtype=np.int64) - np.repeat(first, lengths)
        else:
            positions = np.arange(s, dtype=np.int64)
        out: Arrays = {
            "tokens": ids,
            "labels": labels,
            "loss_mask": loss_mask,
            "position_ids": positions,
        }
        if self.attention == "thd":
            cu = np.full(s + 1, s, dtype=np.int32)
            cu[: first.size] = first
            out["cu_seqlens"] = cu
            out["max_seqlen"] = np.asarray(np.diff(np.append(first, s)).max(), dtype=np.int32)
        elif self.attention == "mask":
            segment = np.cumsum(starts)
            allowed = (segment[:, None] == segment[None, :]) & np.tri(s, dtype=bool)
            out["attention_mask"] = ~allowed[None]
        return out

    def collate(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Stack a micro-batch as torch's default collate does (``(B, S)`` tensors, ``(B, 1, S,
        S)`` masks, ``cu_seqlens`` ``(B, S + 1)``, ``max_seqlen`` ``(B,)``: what Megatron-LM's
        ``get_batch`` takes), and with ``attention="thd"`` add ``packed_seq_params``: the
        micro-batch flattened to one stream of ``B * S`` tokens (:func:`packed_seq_params`), for
        a ``forward_step`` that calls ``GPTModel`` with ``tokens.reshape(1, -1)``."""
        import torch

        _check_items(items, self.keys, "dataset[row] of style='megatron'")
        out: dict[str, Any] = {k: torch.stack([item[k] for item in items]) for k in self.keys}
        if self.attention == "thd":
            out["packed_seq_params"] = packed_seq_params(out["cu_seqlens"])
        return out


def packed_seq_params(cu_seqlens: Any) -> Any:
    """megatron-core's ``PackedSeqParams(qkv_format="thd")`` over a micro-batch flattened to one
    stream: the per-row ``cu_seqlens`` (``(B, S + 1)``, right-padded with ``S``) merged, row
    ``r`` offset by ``r * S``. A plain dict of the same fields when megatron-core is not
    installed (``PackedSeqParams(**d)`` builds it later).

    >>> import torch
    >>> d = packed_seq_params(torch.tensor([[0, 3, 4, 4, 4], [0, 4, 4, 4, 4]], dtype=torch.int32))
    >>> d["cu_seqlens_q"].tolist() if isinstance(d, dict) else d.cu_seqlens_q.tolist()
    [0, 3, 4, 8]
    """
    import torch

    rows, width = cu_seqlens.shape
    s = width - 1
    parts = [torch.zeros(1, dtype=torch.int32)]
    for r in range(rows):
        row = cu_seqlens[r]
        stop = int(torch.nonzero(row == s)[0]) + 1
        parts.append(row[1:stop].to(torch.int32) + r * s)
    cu = torch.cat(parts)
    longest = int((cu[1:] - cu[:-1]).max())
    fields: dict[str, Any] = {
        "qkv_format": "thd",
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
        "max_seqlen_q": longest,
        "max_seqlen_kv": longest,
    }
    try:
        from megatron.core.packed_seq_params import PackedSeqParams
    except ImportError:
        return fields
    return PackedSeqParams(**fields)


def batch_style(style: object) -> HFStyle | MegatronStyle:
    """``style=`` of :class:`~dataorder.llm.packing.dataset.PackedDataset`: ``"hf"``,
    ``"megatron"`` (:class:`MegatronStyle` with its defaults) or a style object."""
    if isinstance(style, HFStyle | MegatronStyle):
        return style
    if style == "hf":
        return HFStyle()
    if style == "megatron":
        return MegatronStyle()
    fail("style", "'hf', 'megatron' or a MegatronStyle", style)
