"""Regenerate the demo data in ``dataorder/data/``: ``python src/dataorder/data/generate.py``.

Both files are synthetic and fully determined by the constants below: numpy's PCG64 seeded with
:data:`SEED`, and nothing else (no clock, no network, no global RNG). Running this script again
rewrites them byte for byte; ``tests/tools/test_demo.py`` checks that.

* ``tokens.npy``: ``uint8`` array of shape ``(TOKEN_SAMPLES, TOKEN_SEQ)``. Each row is one training
  sample of a token dataset: ``TOKEN_SEQ`` tokens from a first-order Markov chain over a vocabulary
  of ``TOKEN_VOCAB`` symbols, in which each symbol has ``TOKEN_FANOUT`` likely successors. A bigram
  model can learn it, so the demo's loss goes down. Row ``i`` is sample ``i``.
* ``image_sizes.csv``: ``IMAGE_COUNT`` rows ``width,height`` (pixels) drawn like a photo
  collection: 85 % use a common camera or screen aspect ratio (1:1, 4:3, 3:2, 16:9, 21:9, 5:4 and
  their portrait twins, weighted towards landscape), 15 % a ratio drawn log-uniformly between 1:3
  and 3:1; the long side is log-uniform in [512, 4096]. Row ``i`` is image ``i``. No image exists:
  the bucket sampler only needs sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 20260601
TOKEN_SAMPLES = 410
TOKEN_SEQ = 33
TOKEN_VOCAB = 64
TOKEN_FANOUT = 3
IMAGE_COUNT = 3000

_COMMON_RATIOS = (
    (1, 1, 0.14),
    (4, 3, 0.16),
    (3, 2, 0.18),
    (16, 9, 0.14),
    (21, 9, 0.03),
    (5, 4, 0.04),
    (3, 4, 0.08),
    (2, 3, 0.10),
    (9, 16, 0.10),
    (4, 5, 0.03),
)


def make_tokens(rng: np.random.Generator) -> np.ndarray:
    """The token dataset: ``(TOKEN_SAMPLES, TOKEN_SEQ)`` uint8 rows of a sparse Markov chain."""
    successors = rng.integers(0, TOKEN_VOCAB, size=(TOKEN_VOCAB, TOKEN_FANOUT))
    out = np.empty((TOKEN_SAMPLES, TOKEN_SEQ), dtype=np.uint8)
    out[:, 0] = rng.integers(0, TOKEN_VOCAB, size=TOKEN_SAMPLES)
    for t in range(1, TOKEN_SEQ):
        choice = rng.integers(0, TOKEN_FANOUT, size=TOKEN_SAMPLES)
        # one token in ten is noise, so the chain is learnable but not trivial
        noise = rng.integers(0, TOKEN_VOCAB, size=TOKEN_SAMPLES)
        nxt = successors[out[:, t - 1], choice]
        out[:, t] = np.where(rng.random(TOKEN_SAMPLES) < 0.1, noise, nxt)
    return out


def make_image_sizes(rng: np.random.Generator) -> np.ndarray:
    """``(IMAGE_COUNT, 2)`` int64 ``(width, height)`` pairs (see the module docstring)."""
    weights = np.array([w for _, _, w in _COMMON_RATIOS])
    ratios = np.array([a / b for a, b, _ in _COMMON_RATIOS])
    common = rng.random(IMAGE_COUNT) < 0.85
    picked = ratios[rng.choice(len(ratios), size=IMAGE_COUNT, p=weights / weights.sum())]
    free = np.exp(rng.uniform(np.log(1 / 3), np.log(3), size=IMAGE_COUNT))
    ratio = np.where(common, picked, free)
    long_side = np.exp(rng.uniform(np.log(512), np.log(4096), size=IMAGE_COUNT))
    width = np.where(ratio >= 1, long_side, long_side * ratio)
    height = np.where(ratio >= 1, long_side / ratio, long_side)
    return np.stack([np.rint(width), np.rint(height)], axis=1).astype(np.int64)


def write(directory: Path) -> list[Path]:
    """Write both files into ``directory`` and return their paths."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    tokens = make_tokens(rng)
    sizes = make_image_sizes(rng)
    token_path = directory / "tokens.npy"
    np.save(token_path, tokens, allow_pickle=False)
    size_path = directory / "image_sizes.csv"
    lines = ["width,height", *(f"{w},{h}" for w, h in sizes.tolist())]
    size_path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return [token_path, size_path]


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    for path in write(target):
        print(f"wrote {path}")
