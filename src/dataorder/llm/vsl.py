"""Variable sequence length batching (Dataset Decomposition): :class:`VariableLengthSampler`.

Dataset Decomposition (Pouransari et al., NeurIPS 2024; OLMo-core's ``NumpyVSLDataset``) cuts
every document into chunks whose lengths are powers of two in ``[min_seq_len, max_seq_len]``
and trains on steps of one chunk length with a constant token count. Here a document of ``L``
tokens becomes ``L // max_seq_len`` chunks of ``max_seq_len``, then one chunk per set bit of
``r = L % max_seq_len`` at or above ``min_seq_len``, largest first, from the document's start
(its binary decomposition); the ``L % min_seq_len`` tokens left are dropped and counted. The
chunk of length ``2**k`` that is not a ``max_seq_len`` one starts at ``L - r + (r >> (k+1) <<
(k+1))``, so a chunk is a pure function of its document's length.

The chunks of one length are a bucket, read in a keyed permutation (of the seed, the epoch and
the length); the core's counted lock-step steps (:mod:`dataorder.core.lockstep`) cut them into
steps: at every step every rank reads ``tokens_per_rank // length`` chunks of one length, so a
compiled model sees one shape per step and every step holds ``tokens_per_rank`` tokens on every
rank. The position is the number of chunks of each length read so far (``chunks.<length>`` in
the state), and the length of the next step is a pure function of it and of the number of
ranks (NOTE [ Counted positions ]): a state continues exactly on any number of ranks.
``curriculum`` orders the lengths: ``"natural"`` interleaves them by their share (NOTE [ Counted
interleave ]), a new arrangement every epoch; ``"grow"`` reads them short to long (the paper's
Grow curricula with one cycle). A length's last chunks that cannot fill a whole step on every
rank are dropped and counted in :attr:`~VariableLengthSampler.tokens_dropped`.

NOTE [ VSL state size ]
    A state holds one count per chunk length in ``[min_seq_len, max_seq_len]``
    (``chunks.<length>``), so it is the one state whose keys grow with its configuration (NOTE
    [ State size ] in :mod:`dataorder.core.state`). At every cap at once (epoch, seed, ``2**31``
    ranks, ``tokens_per_rank`` and the counts at their largest) a state of at most
    :data:`LENGTHS_WITHIN_BOUND` lengths fits ``MAX_STATE_BYTES``; each further length adds at
    most :data:`STATE_BYTES_PER_LENGTH` bytes (a key of up to 10 digits and a count that
    shrinks as the length grows: 31 bytes measured), so 256..8192 (six lengths) is within 640
    bytes and the widest configuration, 1..2**30 (31 lengths), within 1,440.
    :attr:`VariableLengthSampler.max_state_bytes` is a configuration's bound, which the
    contract suite checks. A fixed-size position would not be one count per bucket, and the
    counts are what lets a state continue on any number of ranks.

NOTE [ Lazy chunk index ]
    The plan needs only the number of chunks of each length: one vectorised pass over the
    lengths in slabs, on :func:`~dataorder.llm.packing.lengths.pass_threads` threads (each
    document length read once), counts them per block of
    :data:`CHUNK_BLOCK` documents, an array of ``ceil(N / CHUNK_BLOCK)`` x (distinct lengths)
    ints: 732 KB for 10^9 documents and 6 lengths. No chunk is ever listed. Chunk ``p`` of a
    length (in document order) is found by a binary search over the block counts and one look
    at its block's lengths: O(log N + CHUNK_BLOCK) per chunk, whatever ``N``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_choice, check_int, fail
from dataorder.core.assembly import AssembledSampler, Field, Given, Layout, Schema, recorded
from dataorder.core.batching import Spans
from dataorder.core.buckets import MAX_INTERLEAVE_UNIT
from dataorder.core.cursor import CursorBatchSampler
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED, derive_key
from dataorder.core.lockstep import PHASES, CountedBuckets, CountedEpoch
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.permutation import PERMUTATION_VERSION, Permutation
from dataorder.core.state import MAX_STATE_BYTES
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.llm.packing.lengths import SLAB, DocumentLengths, pass_threads

__all__ = [
    "CHUNK_BLOCK",
    "CURRICULA",
    "LENGTHS_WITHIN_BOUND",
    "ORDER_VERSION",
    "STATE_BYTES_PER_LENGTH",
    "VSL_STREAM",
    "VariableLengthSampler",
    "VslChunks",
]

IntArray = npt.NDArray[np.int64]
#: A chunk: ``(document, start, stop)``, tokens ``[start, stop)`` of the document.
Chunk = tuple[int, int, int]

#: The ``curriculum=`` values.
CURRICULA: tuple[str, ...] = ("natural", "grow")
#: The stream name of every key of the sampler's order.
VSL_STREAM = "vsl"
#: Documents per block of the lazy chunk index (NOTE [ Lazy chunk index ]).
CHUNK_BLOCK = 2**13
#: What ``config.order_version`` records: the counted order (2), over the permutation's and the
#: key derivation's versions. States of the run-based order (0.4's drafts) are refused.
ORDER_VERSION = 20_000 + 100 * PERMUTATION_VERSION + KEY_DERIVATION_VERSION
_MAX_LOG = 30  # the longest chunk: 2**30 tokens
#: Chunk lengths whose counts fit ``MAX_STATE_BYTES`` at every cap (NOTE [ VSL state size ]).
LENGTHS_WITHIN_BOUND = 4
#: Bytes each further chunk length may add to a state (NOTE [ VSL state size ]).
STATE_BYTES_PER_LENGTH = 32

_ITEMS = "micro-batches of (document, start, stop) chunks"


def _power_of_two(name: str, value: object, low: int = 1) -> int:
    v = check_int(name, value, min_value=low, max_value=2**_MAX_LOG)
    if v & (v - 1):
        fail(name, "a power of two", v)
    return v


def _chunks_per_document(lengths: IntArray, k: int, max_log: int) -> IntArray:
    """Chunks of ``2**k`` tokens in each document of ``lengths`` (module docstring)."""
    if k == max_log:
        return lengths >> max_log
    return ((lengths & ((1 << max_log) - 1)) >> k) & 1


class _ChunkIndex:
    """The chunks of each length, by place in document order, counted per block, never listed
    (NOTE [ Lazy chunk index ]): the :class:`~dataorder.core.buckets.Grouping` the epoch reads.
    Bucket ``j`` holds the chunks of ``2**logs[j]`` tokens, every length from min to max.
    """

    def __init__(self, lengths: DocumentLengths, min_log: int, max_log: int) -> None:
        self.lengths, self.max_log, n = lengths, max_log, len(lengths)
        logs = np.arange(min_log, max_log + 1)
        blocks = -(-n // CHUNK_BLOCK)
        counts = np.zeros((logs.size, blocks), dtype=np.int64)

        def count(start: int) -> int:
            """Count slab ``start``'s chunks per block; return its tokens below min_seq_len."""
            values = lengths.slice(start, min(n, start + SLAB))  # SLAB: whole blocks
            pad = np.zeros(-values.size % CHUNK_BLOCK, dtype=np.int64)
            rows = np.concatenate((values, pad)).reshape(-1, CHUNK_BLOCK)
            rest, at = rows & ((1 << max_log) - 1), start // CHUNK_BLOCK
            for i, k in enumerate(logs.tolist()):
                per = rows >> k if k == max_log else (rest >> k) & 1
                counts[i, at : at + rows.shape[0]] = per.sum(axis=1)
            return int((rest & ((1 << min_log) - 1)).sum())

        # numpy releases the GIL: slabs on threads, read in order (the first bad length named)
        with ThreadPoolExecutor(pass_threads()) as pool:
            dropped = sum(pool.map(count, range(0, n, SLAB)))
        if not counts.any():
            fail("lengths", f"documents with at least min_seq_len={1 << min_log} tokens", lengths)
        self.logs = logs
        self.cumulative = np.zeros((self.logs.size, blocks + 1), dtype=np.int64)
        np.cumsum(counts, axis=1, out=self.cumulative[:, 1:])
        self.sizes: IntArray = self.cumulative[:, -1].copy()
        self.tokens_cut = dropped  # the tokens below min_seq_len

    def shape_name(self, bucket: int) -> str:
        return f"{1 << int(self.logs[bucket])} tokens"

    def take(self, bucket: int, places: IntArray) -> list[list[Chunk]]:
        k, cum = int(self.logs[bucket]), self.cumulative[bucket]
        flat = places.ravel()
        block = np.searchsorted(cum, flat, side="right") - 1
        doc, start = np.empty_like(flat), np.empty_like(flat)
        for b in np.unique(block).tolist():
            at = np.flatnonzero(block == b)
            first = b * CHUNK_BLOCK
            values = self.lengths.slice(first, min(len(self.lengths), first + CHUNK_BLOCK))
            per = _chunks_per_document(values, k, self.max_log)
            ends = np.cumsum(per)
            rank = flat[at] - cum[b]  # the chunk's place among its block's chunks of 2**k
            local = np.searchsorted(ends, rank, side="right")
            nth = rank - (ends[local] - per[local])  # which chunk of 2**k in its document
            length = values[local]
            rest = length & ((1 << self.max_log) - 1)
            doc[at] = first + local
            start[at] = (
                nth << self.max_log
                if k == self.max_log
                else length - rest + ((rest >> (k + 1)) << (k + 1))
            )
        table = np.stack((doc, start, start + (1 << k)), axis=1).reshape(*places.shape, 3)
        return [[(d, a, b) for d, a, b in row] for row in table.tolist()]


class VslChunks:
    """The batching rule of :class:`VariableLengthSampler` (:mod:`dataorder.core.batching`): an
    item is a micro-batch of chunks, a chunk ``(document, start, stop)`` covers those tokens
    and is never padding.

    Example:
        >>> rule = VslChunks()
        >>> [a.tolist() for a in rule.spans(rule.slots([(3, 0, 256), (9, 512, 768)]))]
        [[3, 9], [0, 512], [256, 768]]
    """

    name = "vsl-chunks"
    unit = "token"
    batched = True
    dropped_counter = "tokens_dropped"
    padded_counter = "tokens_padded"

    def slots(self, item: Any) -> Sequence[Any]:
        if isinstance(item, str | bytes) or not isinstance(item, Sequence):
            raise TypeError(f"items must be {_ITEMS}; got {type(item).__name__}: {item!r}")
        for c in item:
            if (
                not isinstance(c, Sequence)
                or isinstance(c, str | bytes)
                or len(c) != 3
                or not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in c)
            ):
                raise TypeError(f"items must be {_ITEMS}; got a chunk {c!r}")
        return item

    def spans(self, slots: Sequence[Any]) -> Spans:
        table = np.array(slots, dtype=np.int64).reshape(-1, 3)
        return table[:, 0], table[:, 1], table[:, 2]

    def padding(self, slots: Sequence[Any]) -> int:
        return 0


_RULE = VslChunks()


class VariableLengthSampler(AssembledSampler[list[Chunk]], CursorBatchSampler[list[Chunk]]):
    """Lock-step micro-batches of power-of-two chunks of documents (module docstring).

    Args:
        lengths: The documents' token counts: a :class:`~dataorder.llm.packing.DocumentLengths`
            or what it takes (an int array, a memory map, a list).
        max_seq_len: The longest chunk, a power of two.
        tokens_per_rank: Tokens of every rank's micro-batch, a multiple of ``max_seq_len``.
        data_parallel_rank: This rank.
        data_parallel_size: Data-parallel ranks.
        seed: The seed of the order.
        min_seq_len: The shortest chunk, a power of two ``<= max_seq_len``.
        curriculum: ``"natural"`` (lengths mixed by share) or ``"grow"`` (short to long).
        interleave_unit: ``"natural"`` only: the lengths come in runs of ``interleave_unit``
            rank micro-batches (``interleave_unit / data_parallel_size`` steps); default: one
            step per run (NOTE [ Counted interleave ]). Any number of ranks continues a state.

    Raises:
        ValueError: If a value is out of range (the message names it), or no document holds
            ``min_seq_len`` tokens.
        TypeError: If a value is not an int (or ``lengths`` not integers).

    Example:
        Two ranks, 512 tokens each per step, chunks of 256 and 512 tokens: 700 = 512 + 188
        and 1,100 = 2 x 512 + 76 make three chunks of 512 and drop 188 + 76 tokens; the three
        chunks fill one step of two ranks, and the third is dropped too (512 more)::

        >>> s = VariableLengthSampler([700, 1100], 512, 512, 0, 2, seed=0, min_seq_len=256)
        >>> s.chunk_lengths, s.chunk_counts, len(s), s.tokens_dropped
        ([512], [3], 1, 776)
        >>> list(s)  # rank 0's one micro-batch: tokens [512, 1024) of document 1
        [[(1, 512, 1024)]]
        >>> state = s.state_dict()  # the chunks of each length read, and the config
        >>> state["epoch"], state["chunks.256"], state["chunks.512"], state["config.lengths"]
        (0, 0, 2, '978253bf80fb078d')
    """

    schema = Schema(
        kind="variable_length",
        fields=(
            recorded("seed"),
            recorded("max_seq_len"),
            recorded("min_seq_len"),
            recorded("tokens_per_rank"),
            recorded("curriculum"),
            recorded("interleave_unit", none_as=0),
            Field("order_version", lambda s: ORDER_VERSION),
            Field("lengths", lambda s: s.lengths.fingerprint()),
        ),
        layout=Layout(rank="data_parallel_rank", size="data_parallel_size"),
        batching_of=lambda s: _RULE,
        given=(Given("lengths", "the document lengths (a state holds only their fingerprint)"),),
        progress=(),  # per instance: chunks.<length> for each length (progress_keys)
        steps="micro-batches",
    )

    def __init__(
        self,
        lengths: Any,
        max_seq_len: int,
        tokens_per_rank: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        *,
        seed: int,
        min_seq_len: int = 256,
        curriculum: str = "natural",
        interleave_unit: int | None = None,
    ) -> None:
        self.max_seq_len = _power_of_two("max_seq_len", max_seq_len)
        self.min_seq_len = _power_of_two("min_seq_len", min_seq_len)
        if self.min_seq_len > self.max_seq_len:
            fail("min_seq_len", f"at most max_seq_len={self.max_seq_len}", self.min_seq_len)
        low, high = self.min_seq_len.bit_length() - 1, self.max_seq_len.bit_length() - 1
        # the position: chunks of each length read (NOTE [ Counted positions ]), one key per
        # length of this configuration, so per instance (a schema's progress is per class); set
        # before the cursor starts each at 0
        keys = tuple(f"chunks.{1 << k}" for k in range(low, high + 1))
        self.progress_keys = keys  # type: ignore[misc]
        AssembledSampler.__init__(self)
        self.tokens_per_rank = check_int(
            "tokens_per_rank",
            tokens_per_rank,
            min_value=self.max_seq_len,
            max_value=self.min_seq_len * MAX_BATCH_SIZE,
        )
        if self.tokens_per_rank % self.max_seq_len:
            fail(
                "tokens_per_rank", f"a multiple of max_seq_len={self.max_seq_len}", tokens_per_rank
            )
        self.data_parallel_size = check_int(
            "data_parallel_size", data_parallel_size, min_value=1, max_value=MAX_DP_SIZE
        )
        self.data_parallel_rank = check_int(
            "data_parallel_rank",
            data_parallel_rank,
            min_value=0,
            max_value=self.data_parallel_size - 1,
        )
        self.seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        self.curriculum = check_choice("curriculum", curriculum, CURRICULA)
        if interleave_unit is not None:
            if self.curriculum != "natural":
                fail("interleave_unit", "None unless curriculum='natural'", interleave_unit)
            interleave_unit = check_int(
                "interleave_unit", interleave_unit, min_value=1, max_value=MAX_INTERLEAVE_UNIT
            )
        self.interleave_unit = interleave_unit
        self.lengths = lengths if isinstance(lengths, DocumentLengths) else DocumentLengths(lengths)
        self._index = _ChunkIndex(self.lengths, low, high)
        self._batch_sizes = (self.tokens_per_rank >> self._index.logs).tolist()

    @property
    def dp_rank(self) -> int:
        """This process's data-parallel rank."""
        return self.data_parallel_rank

    def _key(self, epoch: int, purpose: str, log: int) -> int:
        return derive_key(self.seed, epoch=epoch, stream=VSL_STREAM, purpose=purpose, extra=(log,))

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> CountedEpoch[list[Chunk]]:
        logs = self._index.logs.tolist()
        if self.curriculum == "natural":
            phases = [self._key(epoch, "length-phase", k) % PHASES for k in logs]
            buckets = CountedBuckets(
                self._index.sizes, self._batch_sizes, phases=phases, unit=self.interleave_unit
            )
        else:  # short to long
            buckets = CountedBuckets(self._index.sizes, self._batch_sizes, order=range(len(logs)))
        sizes = self._index.sizes.tolist()

        def within(j: int) -> Permutation:
            return Permutation(sizes[j], self._key(epoch, "within-length", logs[j]))

        return CountedEpoch(
            buckets, layout["data_parallel_size"], self.progress_keys, within, self._index
        )

    def epoch_plan(
        self, epoch: int | None = None, *, layout: Mapping[str, int] | None = None
    ) -> CountedEpoch[list[Chunk]]:
        """The plan of ``epoch`` on ``layout`` (:meth:`CursorSampler.epoch_plan
        <dataorder.core.cursor.CursorSampler.epoch_plan>`). On this sampler's layout, the
        cursor's epoch follows the path through the cursor's origin (a loaded state's position
        may lie on another layout's path: NOTE [ Counted positions ])."""
        plan = cast(CountedEpoch[list[Chunk]], super().epoch_plan(epoch, layout=layout))
        e = self._epoch if epoch is None else epoch
        if layout is None and e == self._epoch and any(self._origin.values()):
            return plan.anchored(self._origin)
        return plan

    def _plan_through(
        self, epoch: int, progress: Mapping[str, int] | None
    ) -> CountedEpoch[list[Chunk]]:
        """``state_after``'s path: the epoch's own plan (not the cursor's origin), anchored at
        ``progress``, a position any layout may have reached (None: the epoch's start)."""
        plan = cast(CountedEpoch[list[Chunk]], super().epoch_plan(epoch))
        return plan if progress is None else plan.anchored(progress)

    @property
    def max_state_bytes(self) -> int:
        """The largest state this configuration may write, in bytes of compact JSON:
        ``MAX_STATE_BYTES``, plus :data:`STATE_BYTES_PER_LENGTH` per chunk length of
        ``[min_seq_len, max_seq_len]`` past :data:`LENGTHS_WITHIN_BOUND` (NOTE [ VSL state
        size ])."""
        extra = max(0, len(self.progress_keys) - LENGTHS_WITHIN_BOUND)
        return MAX_STATE_BYTES + STATE_BYTES_PER_LENGTH * extra

    @property
    def chunk_lengths(self) -> list[int]:
        """The chunk lengths that hold chunks, shortest first."""
        return [
            1 << k for k, n in zip(self._index.logs.tolist(), self._index.sizes, strict=True) if n
        ]

    @property
    def chunk_counts(self) -> list[int]:
        """Chunks of each of :attr:`chunk_lengths` in the corpus."""
        return [int(n) for n in self._index.sizes if n]

    @property
    def tokens_dropped(self) -> int:
        """Tokens no rank reads in the cursor's epoch: those below ``min_seq_len`` left by the
        decomposition, plus each length's last chunks that do not fill a whole step on every
        rank. From the epoch's start it is the same every epoch on one layout; after a state of
        another layout was loaded, it counts what that epoch leaves on the path through it."""
        left = np.asarray(self.epoch_plan().left_over(), dtype=np.int64)
        return self._index.tokens_cut + int((left << self._index.logs).sum())

    @property
    def tokens_padded(self) -> int:
        """Padding tokens: always 0 (a step is whole chunks of one length, nothing repeats)."""
        return 0
