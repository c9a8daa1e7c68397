"""Weisfeiler-Lehman colour refinement and WL subtree kernels for subgraphs on k-hop balls.

A colour at round t+1 is the id of the pair (own colour at t, sorted multiset of the
neighbours' colours at t). A ``Palette`` hands out ids shared by every graph refined with it,
so the same rooted subtree gets the same id in any graph. Ids are global over rounds, so a
histogram over rounds 0..T is one sparse count vector; its dot product is the WL subtree kernel.

WLKS-k refines the subgraph induced by the k-hop ball around the subgraph's nodes and counts the
colours of the subgraph's own nodes only: k = 0 is WL on the induced subgraph, k = -1 (the
diameter D, the whole component) is WL on the global graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgekit.errors import InputError
from edgekit.models.wlks.graph import Graph

GLOBAL = -1  # k meaning "the whole graph" (k = D)


@dataclass
class Palette:
    """Colour ids: (round, own colour, neighbour colours) -> id, shared across graphs."""

    ids: dict[tuple, int] = field(default_factory=dict)
    rounds: list[int] = field(default_factory=list)  # round of each id

    def colour(self, key: tuple) -> int:
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.ids)
            self.rounds.append(int(key[0]))
        return got

    def __len__(self) -> int:
        return len(self.ids)


def refine(
    graph: Graph, rounds: int, palette: Palette, labels: np.ndarray | None = None
) -> np.ndarray:
    """WL colours of every node after 0..``rounds`` rounds.

    ``labels`` (n,) int are the initial node labels (default: all equal). Returns
    (rounds + 1, n) int64 palette ids; row t is the colouring after t rounds.
    """
    if rounds < 0:
        raise InputError(f"WL rounds must be >= 0, got {rounds}")
    n = graph.n
    labels = np.zeros(n, dtype=np.int64) if labels is None else np.asarray(labels)
    if labels.shape != (n,):
        raise InputError(f"labels must have shape ({n},), got {labels.shape}")
    out = np.empty((rounds + 1, n), dtype=np.int64)
    out[0] = [palette.colour((0, int(label))) for label in labels]
    for t in range(rounds):
        prev = out[t]
        out[t + 1] = [
            palette.colour((t + 1, int(prev[v]), tuple(sorted(prev[graph.adj[v]].tolist()))))
            for v in range(n)
        ]
    return out


def histogram(colours: np.ndarray, size: int) -> np.ndarray:
    """(rounds + 1, size) float64 colour counts per round of a (rounds + 1, m) colouring."""
    hist = np.zeros((colours.shape[0], size), dtype=np.float64)
    for t, row in enumerate(colours):
        np.add.at(hist[t], row, 1.0)
    return hist


@dataclass
class LevelFeatures:
    """WL histograms of many subgraphs at one k: ``counts`` (N, F) over colours of rounds 0..T.

    ``rounds[j]`` is the WL round colour column j belongs to; ``features(T)`` keeps rounds <= T.
    """

    k: int
    counts: np.ndarray  # (N, F) float64
    rounds: np.ndarray  # (F,) int64

    def features(self, depth: int) -> np.ndarray:
        """(N, F_T) histograms over the colours of rounds 0..``depth``."""
        return self.counts[:, self.rounds <= depth]

    def columns(self, depth: int) -> np.ndarray:
        """Indices of the columns ``features(depth)`` keeps."""
        return np.flatnonzero(self.rounds <= depth)


def subgraph_histograms(
    graph: Graph, subgraphs: list[np.ndarray], k: int, rounds: int
) -> LevelFeatures:
    """WL colour histograms (rounds 0..``rounds``) of each subgraph's nodes on its k-hop ball.

    ``k`` = 0: the induced subgraph; ``k`` = GLOBAL (-1): one refinement of the whole graph;
    any other k >= 1: the induced k-hop neighbourhood of the subgraph.
    """
    if k < GLOBAL:
        raise InputError(f"k must be >= 0 or {GLOBAL} (global), got {k}")
    for i, nodes in enumerate(subgraphs):
        if len(nodes) == 0:
            raise InputError(f"subgraph {i} has no nodes")
    palette = Palette()
    rows: list[np.ndarray] = []
    if k == GLOBAL:
        colours = refine(graph, rounds, palette)
        rows = [colours[:, np.asarray(nodes)] for nodes in subgraphs]
    else:
        for nodes in subgraphs:
            ball = graph.ball(np.asarray(nodes), k)
            colours = refine(graph.induced(ball), rounds, palette)
            rows.append(colours[:, : len(nodes)])  # the ball lists the subgraph's nodes first
    size = len(palette)
    counts = np.stack([histogram(c, size).sum(axis=0) for c in rows])
    used = np.flatnonzero(counts.sum(axis=0) > 0)  # drop colours no subgraph node has
    return LevelFeatures(k, counts[:, used], np.asarray(palette.rounds, dtype=np.int64)[used])


def linear_kernel(a: np.ndarray, b: np.ndarray | None = None, normalize: bool = True) -> np.ndarray:
    """(N, M) WL subtree kernel <a_i, b_j> of histograms a (N, F), b (M, F) (b = a if None);
    ``normalize`` divides by ||a_i|| ||b_j|| (cosine), so every subgraph has k(x, x) = 1."""
    b = a if b is None else b
    gram = a @ b.T
    if normalize:
        na = np.linalg.norm(a, axis=1)
        nb = np.linalg.norm(b, axis=1)
        gram = gram / np.maximum(np.outer(na, nb), 1e-12)
    return gram


def combined_kernel(grams: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """K = sum_l w_l K_l, e.g. a_c K(D) + a_s K(0); weights must be >= 0 (keeps K PSD)."""
    if len(grams) != len(weights) or not grams:
        raise InputError(
            f"need one weight per kernel, got {len(grams)} kernels, {len(weights)} weights"
        )
    if any(w < 0 for w in weights):
        raise InputError(f"kernel weights must be >= 0 to keep the sum PSD, got {weights}")
    return sum(w * g for w, g in zip(weights, grams, strict=True))
