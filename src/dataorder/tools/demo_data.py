"""What the demo trains on: the shipped data, the datasets a loader reads, and the tiny models.

The data ships in ``dataorder/data/`` (synthetic and deterministic, see its ``README.md``): token
rows, image sizes and clip sizes; the token rows also end to end, cut into documents of varied
lengths (:func:`load_documents`), for the packed phase. A sampler's entry
(:mod:`dataorder.tools.demo_samplers`) picks a dataset and a model from here. torch is imported
only where a dataset or a model is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder.core.keys import derive_key
from dataorder.llm.packing.dataset import PackedDataset

__all__ = [
    "DOCUMENT_LENGTHS",
    "PACKED_SEQ_LEN",
    "Documents",
    "LatentDataset",
    "LossFn",
    "Model",
    "PackedTokens",
    "TokenDataset",
    "latent_model",
    "load_clip_sizes",
    "load_documents",
    "load_image_sizes",
    "load_tokens",
    "packed_model",
    "token_model",
    "video_model",
]

_VOCAB = 64  # tokens.npy holds ids below this (see data/generate.py)
_LATENT_CHANNELS = 4
_LATENT_DOWNSCALE = 64  # a bucket of w x h pixels gives a latent of (w / 64) x (h / 64)

#: The packed phase: tokens per packed row, and the range the documents' lengths are drawn from
#: (log-uniformly, so most are shorter than a row and about one in six is longer, split across
#: rows).
PACKED_SEQ_LEN = 32
DOCUMENT_LENGTHS = (1, 64)
_DOCUMENT_STREAM = "demo/documents"

#: ``loss_fn(model, batch)``: the loss of one micro-batch (a 0-d tensor).
LossFn = Callable[[Any, dict[str, Any]], Any]
#: A model and its loss.
Model = tuple[Any, LossFn]


# -- the shipped data -----------------------------------------------------------------------------
def _data_file(name: str) -> Any:
    return resources.files("dataorder").joinpath("data").joinpath(name)


def load_tokens() -> npt.NDArray[np.uint8]:
    """The shipped token dataset: ``uint8`` array ``(samples, sequence length)``."""
    with _data_file("tokens.npy").open("rb") as f:
        tokens: npt.NDArray[np.uint8] = np.load(f, allow_pickle=False)
    return tokens


def load_image_sizes() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The shipped image sizes: ``(widths, heights)``, each int64 of shape ``(N,)``."""
    text = _data_file("image_sizes.csv").read_text(encoding="ascii")
    rows = np.array(
        [[int(v) for v in line.split(",")] for line in text.splitlines()[1:] if line],
        dtype=np.int64,
    )
    return rows[:, 0].copy(), rows[:, 1].copy()


def load_clip_sizes() -> tuple[
    npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], list[Fraction]
]:
    """The shipped clip sizes: ``(widths, heights, frames, fps)`` (see ``data/README.md``)."""
    text = _data_file("clip_sizes.csv").read_text(encoding="ascii")
    rows = [line.split(",") for line in text.splitlines()[1:] if line]
    ints = np.array([[int(r[0]), int(r[1]), int(r[2])] for r in rows], dtype=np.int64)
    fps = [Fraction(r[3]) for r in rows]
    return ints[:, 0].copy(), ints[:, 1].copy(), ints[:, 2].copy(), fps


class Documents:
    """The shipped token rows end to end, cut into documents (:func:`load_documents`).

    Attributes:
        tokens: Every token, ``uint8`` of shape ``(T,)`` (the rows of ``tokens.npy`` in order).
        lengths: Each document's token count, int64, summing to ``T``.
    """

    def __init__(self, tokens: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> None:
        self.tokens = tokens
        self.lengths = lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.lengths.size)

    def document(self, d: int) -> npt.NDArray[np.uint8]:
        """The tokens of document ``d`` (a view)."""
        start = int(self.starts[d])
        return self.tokens[start : start + int(self.lengths[d])]


def load_documents() -> Documents:
    """The shipped tokens cut into documents of varied lengths: a pure function of the data.

    Document ``i``'s length is log-uniform in :data:`DOCUMENT_LENGTHS`, drawn from its own key
    (:func:`~dataorder.core.keys.derive_key`, so no RNG stream and no numpy version decides it);
    the last document takes what is left. Over the 13,530 shipped tokens that is about 900
    documents, a mean of 15 tokens, about 150 longer than a :data:`PACKED_SEQ_LEN` row.
    """
    tokens = load_tokens().reshape(-1)
    low, high = DOCUMENT_LENGTHS
    span = math.log(high + 1) - math.log(low)
    lengths: list[int] = []
    left = int(tokens.size)
    while left:
        key = derive_key(
            0, epoch=0, stream=_DOCUMENT_STREAM, purpose="length", extra=(len(lengths),)
        )
        n = min(int(low * math.exp(span * key / 2**64)), high)  # log-uniform in [low, high]
        lengths.append(min(n, left))
        left -= lengths[-1]
    return Documents(tokens, np.array(lengths, dtype=np.int64))


# -- datasets -------------------------------------------------------------------------------------
class TokenDataset:
    """Token rows; a padding slot (``None``) gives zeros with a zero loss mask."""

    def __init__(self, tokens: npt.NDArray[np.uint8]) -> None:
        import torch

        self.tokens = torch.from_numpy(tokens.astype(np.int64))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, idx: int | None) -> dict[str, Any]:
        import torch

        if idx is None:  # Megatron's padding slot: keep the shape, mask the loss
            seq = self.tokens.shape[1]
            return {
                "index": -1,
                "tokens": torch.zeros(seq, dtype=torch.long),
                "mask": torch.zeros(seq - 1),
            }
        return {
            "index": idx,
            "tokens": self.tokens[idx],
            "mask": torch.ones(self.tokens.shape[1] - 1),
        }


class LatentDataset:
    """A synthetic latent per sample, shaped by its bucket and seeded by its index: an image's
    ``(channels, h / 64, w / 64)``, a clip's ``(channels, latent frames, h / 16, w / 16)``."""

    def __init__(self, multires: Any) -> None:
        self.multires = multires

    def __len__(self) -> int:
        return len(self.multires)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        import torch

        item = self.multires[idx]
        w, h = item["bucket_resolution"]
        g = torch.Generator().manual_seed(idx)
        if "bucket_frames" in item:  # a video bucket: a causal VAE's latent frames
            frames = (item["bucket_frames"] - 1) // 4 + 1
            shape: tuple[int, ...] = (_LATENT_CHANNELS, frames, h // 16, w // 16)
        else:
            shape = (_LATENT_CHANNELS, h // _LATENT_DOWNSCALE, w // _LATENT_DOWNSCALE)
        return {
            "index": idx,
            "bucket": int(item["bucket"]),
            "latent": torch.randn(shape, generator=g),
            "noise": torch.randn(shape, generator=g),
        }


class PackedTokens:
    """Packed rows of :class:`Documents` through :class:`~dataorder.llm.packing.dataset.
    PackedDataset` (``input_ids``, ``position_ids``, ``document_ids``, ``labels``), plus each
    row's ``spans``: ``(seq_len, 3)`` int64, the row's ``(document, start, stop)`` spans then
    rows of -1, so that a process can record which tokens its model trained on.

    ``collate`` is :meth:`PackedDataset.collate` (which adds ``cu_seqlens`` and ``max_seqlen``).
    """

    def __init__(self, documents: Documents, seq_len: int) -> None:
        self.documents = documents
        self.packed = PackedDataset([documents.document(d) for d in range(len(documents))], seq_len)
        self.collate = PackedDataset.collate

    def __getitem__(self, row: Any) -> dict[str, Any]:
        import torch

        item: dict[str, Any] = self.packed[row]
        spans = torch.full((self.packed.seq_len, 3), -1, dtype=torch.long)
        if len(row):
            spans[: len(row)] = torch.tensor([list(span) for span in row], dtype=torch.long)
        item["spans"] = spans
        return item


# -- models ---------------------------------------------------------------------------------------
def _init_parameters(model: Any, seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def token_model(seed: int) -> Model:
    """A next-token model over :class:`TokenDataset` batches; padding slots add no loss."""
    import torch

    model = torch.nn.Sequential(torch.nn.Embedding(_VOCAB, 32), torch.nn.Linear(32, _VOCAB))
    _init_parameters(model, seed)

    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        tokens, mask = batch["tokens"], batch["mask"]
        logits = m(tokens[:, :-1])
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, _VOCAB), tokens[:, 1:].reshape(-1), reduction="none"
        )
        # averaged over real tokens only, so a padding slot adds nothing to the loss
        return (ce * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)

    return model, loss_fn


def _denoiser(seed: int, video: bool) -> Model:
    import torch

    conv = torch.nn.Conv3d if video else torch.nn.Conv2d
    model = conv(_LATENT_CHANNELS, _LATENT_CHANNELS, 3, padding=1)
    _init_parameters(model, seed)

    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        noisy = batch["latent"] + 0.5 * batch["noise"]
        return torch.nn.functional.mse_loss(m(noisy), batch["noise"])

    return model, loss_fn


def latent_model(seed: int) -> Model:
    """A noise predictor over image latents (:class:`LatentDataset` of image buckets)."""
    return _denoiser(seed, video=False)


def video_model(seed: int) -> Model:
    """A noise predictor over clip latents (:class:`LatentDataset` of video buckets)."""
    return _denoiser(seed, video=True)


def packed_model(seed: int) -> Model:
    """A tiny causal language model over :class:`PackedTokens` micro-batches.

    One attention layer over token and position embeddings: positions from ``position_ids``
    (restarting at every document), attention kept inside documents by a block-diagonal causal
    mask from ``document_ids`` (a token sees the earlier tokens of its own span only; padding
    sees padding), the loss on ``labels`` (-100 ignored: padding, and the first token of every
    span, NOTE [ Packed labels ] in :mod:`dataorder.llm.packing.dataset`).
    """
    import torch

    width = 8

    class TinyCausalLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = torch.nn.Embedding(_VOCAB, width)
            self.positions = torch.nn.Embedding(PACKED_SEQ_LEN, width)
            self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
            self.head = torch.nn.Linear(width, _VOCAB)

        def forward(self, batch: dict[str, Any]) -> Any:
            x = self.tokens(batch["input_ids"]) + self.positions(batch["position_ids"])
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            doc = batch["document_ids"]
            s = doc.shape[-1]
            causal = torch.ones(s, s, dtype=torch.bool).tril()
            mask = (doc[:, :, None] == doc[:, None, :]) & causal  # block-diagonal, causal
            attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.head(x + attended)

    model = TinyCausalLM()
    _init_parameters(model, seed)

    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        logits = m(batch)
        # labels are unshifted: the prediction at token i is scored against label i + 1
        labels = batch["labels"][:, 1:].reshape(-1)
        ce = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, _VOCAB), labels, ignore_index=-100, reduction="sum"
        )
        return ce / (labels != -100).sum().clamp(min=1)

    return model, loss_fn
