"""The trees behind :class:`~dataorder.core.apportion.Apportionment`, and why they are chosen.

Every internal node of a tree splits its parent's count between its two children by a rounded
proportion, so a leaf's deviation from its exact share depends only on the shape of the tree
(NOTE [ Deviation bound ]). Two constructions are built and the one with the smaller worst
bound is kept.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right

__all__ = ["CONSTRUCTIONS", "MAX_DEPTH", "Tree"]

# Huffman trees over weights >= 1 summing to at most 2**40 are at most 58 deep (a node at depth
# d weighs at least the Fibonacci number F(d + 2)); other candidates deeper than this are dropped.
MAX_DEPTH = 64

# NOTE [ Deviation bound ]
# Write e_u(t) = c_u(t) - w_u * t / W for any node u. The split at the parent p of u gives
# c_u = (w_u / w_p) * c_p + d_u with a rounding error d_u, |d_u| <= D_p = (w_p // 2) / w_p <= 1/2
# (floor((x + h) / w) with h = w // 2 is a round-to-nearest). Hence e_u = (w_u / w_p) e_p + d_u,
# and since e_root = 0, unrolling along the path from the root to a leaf l gives
#     e_l = sum over nodes u on the path, u != root, of (w_l / w_u) * d_u,
#     |e_l| <= B_l = sum over the same u of (w_l / w_u) * D_parent(u).
# The term of the leaf itself is D <= 1/2; ancestors contribute in proportion to the leaf's share
# of them. So what matters is that each leaf's ancestors be heavy compared with the leaf.
# * Huffman (merge the two lightest): the sibling of any node u weighs at least u's heavier child
#   (both children were the lightest items when merged; everything merged later is heavier), so
#   every ancestor weighs >= 1.5x the one below it, and the grandparent >= 2x the leaf. Term by
#   term the leaf, its parent, grandparent and the ancestors above contribute at most 1, 1,
#   1/2 and 1/3 + 2/9 + ... = 1: B_l < 1/2 * 3.5 = 1.75 for every weight set. Its weak spot is
#   a leaf merged with a much lighter sibling deep in the tree (w_l / w_parent ~ 1), which
#   happens whenever the two lightest items differ a lot.
# * Ratio merge (merge the adjacent pair, in weight order, of smallest weight ratio): merges
#   similar weights first, so most ancestors double; dissimilar leftovers meet near the root,
#   where their few ancestors are heavy. Typically B ~ 1.0-1.1 where Huffman gives 1.4-1.5, but
#   no constant bound is known and some sets (geometric weights) favour Huffman.
# The constructor builds both and keeps the one whose worst B_l is smaller (Huffman on ties), so
# the guarantee is Huffman's and the typical case is the better of the two. Measured in
# REPORT.md; an exhaustive search over small K shows optimal trees reach max B ~ 1.06.


# -- tree construction ----------------------------------------------------------------------


class Tree:
    """A full binary tree over ``n`` leaves: leaves are nodes ``0..n-1``, internal nodes
    ``n..2n-2`` in creation order, the root is the last node (or leaf 0 when ``n == 1``)."""

    __slots__ = ("first", "n", "second", "weight")

    def __init__(self, leaf_weights: list[int]) -> None:
        self.n = len(leaf_weights)
        self.weight = list(leaf_weights)
        self.first: list[int] = []  # per internal node (index v - n): the child given the floor
        self.second: list[int] = []

    def merge(self, a: int, b: int) -> int:
        self.first.append(a)
        self.second.append(b)
        self.weight.append(self.weight[a] + self.weight[b])
        return len(self.weight) - 1

    @property
    def root(self) -> int:
        return len(self.weight) - 1

    def depths(self) -> list[int]:
        depth = [0] * len(self.weight)
        for v in range(self.root, self.n - 1, -1):  # parents are created after their children
            i = v - self.n
            depth[self.first[i]] = depth[self.second[i]] = depth[v] + 1
        return depth

    def bounds(self) -> list[float]:
        """Per-leaf deviation bound ``B_l`` of NOTE [ Deviation bound ]."""
        acc = [0.0] * len(self.weight)  # sum over path u != root of D_parent(u) / w_u
        for v in range(self.root, self.n - 1, -1):
            i = v - self.n
            wv = self.weight[v]
            d = (wv // 2) / wv
            for u in (self.first[i], self.second[i]):
                acc[u] = acc[v] + d / self.weight[u]
        return [self.weight[j] * acc[j] for j in range(self.n)]


def _huffman(weights: list[int], seq: list[int]) -> Tree:
    """Merge the two lightest items; ties by ``seq`` (leaves), then creation order."""
    tree = Tree(weights)
    n = len(weights)
    heap = [(w, s, j) for j, (w, s) in enumerate(zip(weights, seq, strict=True))]
    heapq.heapify(heap)
    while len(heap) > 1:
        wa, _, a = heapq.heappop(heap)
        wb, _, b = heapq.heappop(heap)
        v = tree.merge(a, b)
        heapq.heappush(heap, (wa + wb, n + v, v))  # n + v > every leaf seq: internal nodes last
    return tree


def _ratio_merge(weights: list[int], seq: list[int]) -> Tree:
    """Merge the adjacent pair (in (weight, seq) order) of smallest weight ratio.

    Ties by the lighter pair, then by seq. Adjacent pairs sit in a heap with lazy deletion: a
    popped pair is used only if both items are alive and still adjacent; every new adjacency is
    pushed when it forms, so no valid pair is ever missing.
    """
    tree = Tree(weights)
    n = len(weights)
    keys = sorted((w, s, j) for j, (w, s) in enumerate(zip(weights, seq, strict=True)))
    heap: list[tuple[float, int, int, int, tuple[int, int, int], tuple[int, int, int]]] = []

    def push(i: int) -> None:
        if 0 <= i < len(keys) - 1:
            ka, kb = keys[i], keys[i + 1]
            # Float ratio: correctly rounded IEEE division, identical on every machine.
            heapq.heappush(heap, (kb[0] / ka[0], ka[0] + kb[0], ka[1], kb[1], ka, kb))

    for i in range(len(keys) - 1):
        push(i)
    while len(keys) > 1:
        *_, ka, kb = heapq.heappop(heap)
        i = bisect_left(keys, ka)
        if i + 1 >= len(keys) or keys[i] != ka or keys[i + 1] != kb:
            continue  # stale: one of them was merged, or something was inserted between
        del keys[i : i + 2]
        push(i - 1)  # the items on either side of the removed pair are now adjacent
        v = tree.merge(ka[2], kb[2])
        kv = (tree.weight[v], n + v, v)
        pos = bisect_right(keys, kv)
        keys.insert(pos, kv)
        push(pos - 1)
        push(pos)
    return tree


CONSTRUCTIONS = (("huffman", _huffman), ("ratio", _ratio_merge))
