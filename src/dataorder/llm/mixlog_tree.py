"""The tree of a mixture log's counts, walked in exact int64 (NOTE [ Segment bases in int64 ]).

The counts of a :class:`~dataorder.llm.mixlog_counts.LogMixture` come from a fixed binary tree
over the sources (NOTE [ Mixture log exactness ] in :mod:`dataorder.llm.mixlog`).
:func:`source_tree` builds it; :class:`LevelWalk` walks it for one segment (all nodes of a level
at once) or for many consecutive segments (NOTE [ Waves of the tree ]), exactly, in int64.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["LevelWalk", "quota_constant", "source_tree"]

_I64 = np.int64
_U64 = np.uint64
_LOW20 = (1 << 20) - 1
_LOW40 = (1 << 40) - 1


def source_tree(k: int) -> tuple[list[tuple[int, int, int, int, int, int]], list[int]]:
    """The fixed binary tree over ``k`` sources, balanced by index.

    Returns ``(nodes, depths)``: internal nodes top-down as ``(v, a, b, lo, mid, hi)`` (node
    ``v`` covers sources ``lo .. hi - 1``, its first child ``a`` covers ``lo .. mid - 1``;
    sources are nodes ``0 .. k - 1``), and each source's depth.
    """
    nodes: list[tuple[int, int, int, int, int, int]] = []
    depths = [0] * k
    counter = [k]

    def build(lo: int, hi: int, depth: int) -> int:
        if hi - lo == 1:
            depths[lo] = depth
            return lo
        mid = (lo + hi) // 2
        a = build(lo, mid, depth + 1)
        b = build(mid, hi, depth + 1)
        v = counter[0]
        counter[0] += 1
        nodes.append((v, a, b, lo, mid, hi))
        return v

    build(0, k, 0)
    nodes.reverse()  # parents before children
    return nodes, depths


def quota_constant(
    ua: npt.NDArray[np.int64],
    uv: npt.NDArray[np.int64],
    ev: npt.NDArray[np.int64],
    ea: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """``ua (E_v >> 40) - uv (E_a >> 40) + floor(L / 2**40)`` of NOTE [ Segment bases in
    int64 ], exact in int64."""
    evl, eal = ev & _LOW40, ea & _LOW40
    a1 = ua * (evl >> 20) - uv * (eal >> 20)
    a0 = ua * (evl & _LOW20) - uv * (eal & _LOW20)
    out: npt.NDArray[np.int64] = (
        ua * (ev >> 40) - uv * (ea >> 40) + (((uv << 19) + a1 + (a0 >> 20)) >> 20)
    )
    return out


class LevelWalk:
    """The walk of :meth:`LogMixture._local` over all nodes of a level at once, in int64.

    NOTE [ Segment bases in int64 ]
        A segment's base (each source's count and scaled error at its start) depends on every
        earlier segment, so a resume at ``N`` entries walks the tree ``N`` times. In Python
        integers that is 0.66 ms an entry at K = 200; here one entry is a few dozen numpy
        operations on arrays of a level's nodes (the tree has ``ceil(log2 K)`` levels). The
        quota ``x = floor(P / Q)`` of :meth:`LogMixture._segment_params` (halved:
        ``P = 2**40 ua n + 2**39 uv + ua E_v - uv E_a``, ``Q = 2**40 uv``, errors scaled by
        ``2**40``) has 143-bit terms, yet it is computed exactly in int64:

        * an estimate ``x0 = floor(float(ua / uv) * n)``, off by at most ``2**12`` for
          ``n <= 2**62``; then ``x = x0 + floor(R / Q)`` with ``R = P - x0 Q``;
        * ``R = 2**40 H + L``, ``H = (ua n - x0 uv) + ua (E_v >> 40) - uv (E_a >> 40)``: the
          term ``ua n - x0 uv`` is near ``uv (rho n - x0)``, below ``2**53``, so its value
          modulo ``2**64`` (wrapping uint64 products) is the value;
        * ``L = 2**39 uv + ua (E_v & (2**40 - 1)) - uv (E_a & (2**40 - 1))``, each low part
          split in two 20-bit halves so every product stays below ``2**60``, and
          ``floor(L / 2**40)`` taken as two floors by ``2**20``;
        * ``floor(R / Q) = floor((H + floor(L / 2**40)) / uv)``, since ``2**40 H`` is a
          multiple of ``2**40``.

        The errors at the segment's end, ``E + 2**40 c - u length``, wrap the same way and are
        exact because they are bounded (NOTE [ Mixture log exactness ]). A lookup
        (:meth:`LogMixture._local`) still walks in Python integers; ``tests/llm/test_mixlog.py``
        checks both against the per-entry walk in Python integers on random logs.
    """

    __slots__ = (
        "_a",
        "_all_first",
        "_all_level",
        "_all_order",
        "_b",
        "_hi",
        "_inner_first",
        "_inner_level",
        "_k",
        "_leaf_level",
        "_levels",
        "_lo",
        "_mid",
        "_node_hi",
        "_node_lo",
        "_v",
    )

    def __init__(self, nodes: list[tuple[int, int, int, int, int, int]], k: int) -> None:
        self._k = k
        depth = {2 * k - 2: 0}
        for v, a, b, *_ in nodes:  # parents before children
            depth[a] = depth[b] = depth[v] + 1
        order = sorted(nodes, key=lambda node: depth[node[0]])
        cols = np.array(order, dtype=np.intp).reshape(-1, 6)
        self._v, self._a, self._b, self._lo, self._mid, self._hi = cols.T.copy()
        bounds = np.cumsum(np.bincount([depth[node[0]] for node in order])).tolist()
        self._levels = [slice(lo, hi) for lo, hi in zip([0, *bounds], bounds, strict=False)]
        # every node (sources 0 .. k - 1, then the inner ones) by level, for the waves
        size = 2 * k - 1
        self._node_lo = np.arange(size, dtype=np.intp)
        self._node_hi = np.arange(1, size + 1, dtype=np.intp)
        for v, _, _, lo, _, hi in nodes:
            self._node_lo[v], self._node_hi[v] = lo, hi
        levels = np.array([depth[x] for x in range(size)], dtype=np.intp)
        self._all_order = np.argsort(levels, kind="stable").astype(np.intp)
        self._all_level = levels[self._all_order]
        self._leaf_level = levels[:k]
        self._all_first = np.searchsorted(self._all_level, np.arange(levels.max() + 2)).tolist()
        self._inner_level = levels[self._v]
        self._inner_first = np.searchsorted(self._inner_level, np.arange(levels.max() + 1)).tolist()

    def local(
        self, units: npt.NDArray[np.int64], errors: npt.NDArray[np.int64], length: int
    ) -> npt.NDArray[np.int64]:
        """Per-source counts ``length`` samples into a segment with weights ``units`` and
        scaled errors ``errors`` at its start."""
        k = self._k
        if k == 1:
            return np.array([length], dtype=_I64)
        pu = np.zeros(k + 1, dtype=_U64)
        np.cumsum(units.view(_U64), out=pu[1:])
        pe = np.zeros(k + 1, dtype=_U64)
        np.cumsum(errors.view(_U64), out=pe[1:])  # wraps; the differences are exact
        lo, mid, hi = self._lo, self._mid, self._hi
        ua = (pu[mid] - pu[lo]).view(_I64)
        uv = (pu[hi] - pu[lo]).view(_I64)
        ev = (pe[hi] - pe[lo]).view(_I64)
        ea = (pe[mid] - pe[lo]).view(_I64)
        empty = uv == 0
        if empty.any():  # no weight below v: any rho keeps the bound; split its debts
            ua = np.where(empty, 1, ua)
            uv = np.where(empty, 2, uv)
        const = quota_constant(ua, uv, ev, ea)
        rho = ua / uv
        ua_u, uv_u = ua.view(_U64), uv.view(_U64)
        c = np.zeros(2 * k - 1, dtype=_I64)
        c[-1] = length
        v_all, a_all, b_all = self._v, self._a, self._b
        for level in self._levels:
            n = c[v_all[level]]
            x0 = (rho[level] * n).astype(_I64)  # n >= 0: truncation is the floor
            t1 = (ua_u[level] * n.view(_U64) - uv_u[level] * x0.view(_U64)).view(_I64)
            x = x0 + (t1 + const[level]) // uv[level]
            ca = np.minimum(np.maximum(x, 0), n)
            c[a_all[level]] = ca
            c[b_all[level]] = n - ca
        out: npt.NDArray[np.int64] = c[:k].copy()
        return out

    def bases(
        self,
        units: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        errors: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The bases at the ends of ``m`` consecutive segments (weights ``units[j]``,
        ``lengths[j]`` samples), from the base ``counts``, ``errors`` of the first: arrays of
        shape ``(m, K)``.

        NOTE [ Waves of the tree ]
            Node ``v`` splits segment ``s`` from its own count at the end of ``s`` (set by its
            parent in ``s``), its error at the start of ``s`` and its first child's error at
            the start of ``s`` (set when the child's share of ``s - 1`` was known). So level
            ``l`` of segment ``s`` needs only level ``l - 1`` of ``s`` and level ``l`` of
            ``s - 1``: wave ``w`` computes every level ``l`` at segment ``w - l`` at once, the
            whole tree in one set of numpy operations per segment instead of one per level.
            Each node's arithmetic is :meth:`local`'s.
        """
        k, m = self._k, len(lengths)
        size = 2 * k - 1
        nodes_lo, nodes_hi = self._node_lo, self._node_hi
        pu = np.zeros((m, k + 1), dtype=_U64)
        np.cumsum(units.view(_U64), axis=1, out=pu[:, 1:])
        un = pu[:, nodes_hi] - pu[:, nodes_lo]  # (m, nodes): each node's units per segment
        drawn = un * lengths.view(_U64)[:, None]  # its integral over the segment x 2**40 (wraps)
        ua_all, uv_all = un[:, self._a].view(_I64), un[:, self._v].view(_I64)
        empty = uv_all == 0
        if empty.any():  # no weight below v: any rho keeps the bound; split its debts
            ua_all = np.where(empty, 1, ua_all)
            uv_all = np.where(empty, 2, uv_all)
        rho_all = ua_all / uv_all
        start = np.zeros(k + 1, dtype=_U64)
        np.cumsum(counts.view(_U64), out=start[1:])
        cs = (start[nodes_hi] - start[nodes_lo]).view(_I64)  # counts at the current start
        np.cumsum(errors.view(_U64), out=start[1:])
        es = (start[nodes_hi] - start[nodes_lo]).view(_I64)  # scaled errors there
        pending = np.zeros(size, dtype=_I64)  # the count at the end of the current segment
        taken = np.zeros(size, dtype=_I64)  # n: what the node received in it
        entered = np.zeros(size, dtype=_I64)  # its error at the start of it
        ends = int(cs[size - 1]) + np.cumsum(lengths)
        snap_c = np.empty((m + len(self._all_first), k), dtype=_I64)  # sources after wave w
        snap_e = np.empty_like(snap_c)
        order, level_of, first = self._all_order, self._all_level, self._all_first
        inner, inner_level, inner_first = self._v, self._inner_level, self._inner_first
        a_all, b_all = self._a, self._b
        inner_cols = np.arange(len(inner))
        top = len(first) - 2  # the deepest level
        for w in range(m + top):
            lo_level, hi_level = max(0, w - m + 1), min(w, top)
            if w < m:
                pending[size - 1] = ends[w]
            # every node whose count at the end of its segment w - level is known: advance
            span = slice(first[lo_level], first[hi_level + 1])
            idx, seg = order[span], w - level_of[span]
            n = pending[idx] - cs[idx]
            taken[idx] = n
            entered[idx] = es[idx]
            cs[idx] = pending[idx]
            es[idx] = (es[idx].view(_U64) + (n.view(_U64) << _U64(40)) - drawn[seg, idx]).view(_I64)
            snap_c[w] = cs[:k]
            snap_e[w] = es[:k]
            # every inner node splits its segment w - level between its children
            hi_inner = min(hi_level, top - 1)
            if lo_level > hi_inner:
                continue
            span = slice(inner_first[lo_level], inner_first[hi_inner + 1])
            v, seg = inner[span], w - inner_level[span]
            a, b, cols = a_all[span], b_all[span], inner_cols[span]
            ua, uv = ua_all[seg, cols], uv_all[seg, cols]
            const = quota_constant(ua, uv, entered[v], es[a])
            n = taken[v]
            x0 = (rho_all[seg, cols] * n).astype(_I64)
            t1 = (ua.view(_U64) * n.view(_U64) - uv.view(_U64) * x0.view(_U64)).view(_I64)
            ca = np.minimum(np.maximum(x0 + (t1 + const) // uv, 0), n)
            pending[a] = cs[a] + ca
            pending[b] = cs[b] + n - ca
        # source d's base at the end of segment j is its snapshot after wave j + level(d)
        rows = np.arange(m)[:, None] + self._leaf_level[None, :]
        leaves = np.arange(k)[None, :]
        return snap_c[rows, leaves], snap_e[rows, leaves]
