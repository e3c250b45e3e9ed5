"""Key derivation: one 64-bit key per (seed, epoch, stream, purpose, ...).

Every random choice in dataorder is keyed by a value from :func:`derive_key`. The inputs are
encoded unambiguously and hashed with BLAKE2b, so distinct inputs give unrelated keys. In
particular ``derive_key(s, epoch=e)`` and ``derive_key(s + 1, epoch=e - 1)`` are unrelated, unlike
the ``seed + epoch`` seeding of torch's DistributedSampler, NeMo and OLMo, where seeds ``s`` and
``s + 1`` replay each other's orders one epoch apart.

Example:
    >>> from dataorder.core.keys import derive_key
    >>> k = derive_key(1234, epoch=3, stream="megatron", purpose="sample-order")
    >>> 0 <= k < 2**64
    True
    >>> k == derive_key(1235, epoch=2, stream="megatron", purpose="sample-order")
    False
"""

from __future__ import annotations

import hashlib
import json

from dataorder._validate import check_int

__all__ = ["KEY_DERIVATION_VERSION", "MAX_SEED", "derive_key"]

#: Bumped whenever the encoding or hash changes; it is part of every sampler's fingerprint, so a
#: checkpoint written under another derivation is refused rather than silently reordered.
KEY_DERIVATION_VERSION = 1

#: The largest seed a sampler accepts (63 bits). With it, and epochs below 2**32, every state
#: stays within MAX_STATE_BYTES (NOTE [ State size ] in dataorder.core.state), and
#: ``seed + epoch`` (what the torch-compatible orders pass to ``torch.manual_seed``) stays
#: below 2**64.
MAX_SEED = 2**63 - 1

_PERSON = b"dataorder.key.v1"  # BLAKE2b personalisation: keys never collide with other uses


def derive_key(
    seed: int, *, epoch: int, stream: str, purpose: str, extra: tuple[int, ...] = ()
) -> int:
    """Return a 64-bit key for one independent random stream.

    Args:
        seed: The user's seed, any non-negative int (arbitrarily large ints are fine).
        epoch: The epoch, a non-negative int.
        stream: Which data stream the key serves, e.g. ``"megatron"`` or a dataset name.
        purpose: What the randomness decides, e.g. ``"sample-order"`` or ``"bucket-order"``.
        extra: Further non-negative ints that select a sub-stream, e.g. a bucket id.

    Returns:
        An int in ``[0, 2**64)``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``seed``, ``epoch`` or an ``extra`` entry is negative.
    """
    seed = check_int("seed", seed, min_value=0)
    epoch = check_int("epoch", epoch, min_value=0)
    if not isinstance(stream, str):
        raise TypeError(f"stream must be a str; got stream={stream!r}")
    if not isinstance(purpose, str):
        raise TypeError(f"purpose must be a str; got purpose={purpose!r}")
    parts = [check_int("extra", e, min_value=0) for e in extra]
    # JSON of a list is an unambiguous, injective encoding of these types (ints as decimal text).
    payload = json.dumps([seed, epoch, stream, purpose, parts], separators=(",", ":"))
    digest = hashlib.blake2b(payload.encode("utf-8"), digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "little")
