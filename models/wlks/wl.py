"""Weisfeiler-Lehman colour refinement and WL subtree kernels for subgraphs on k-hop balls.

A colour at round t+1 is the id of the pair (own colour at t, sorted multiset of the
neighbours' colours at t). A ``Palette`` hands out ids shared by every graph refined with it,
so the same rooted subtree gets the same id in any graph. Ids are global over rounds, so a
histogram over rounds 0..T is one sparse count vector; its dot product is the WL subtree kernel.

WLKS-k refines the subgraph induced by the k-hop ball around the subgraph's nodes and counts the
colours of the subgraph's own nodes only: k = 0 is WL on the induced subgraph, k = -1 (the
diameter D, the whole component) is WL on the global graph.

A fitted model keeps each level's palette in a ``WLFeaturizer`` (JSON, up to a few hundred
kB), so subgraphs of graphs it never saw get histograms in the fitted column layout: their
colours that the fit also saw are counted in the same columns, colours it never saw count for
nothing.
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
    palette: Palette | None = None  # the palette the colours were refined with
    ids: np.ndarray | None = None  # (F,) int64 palette id of each column

    def features(self, depth: int) -> np.ndarray:
        """(N, F_T) histograms over the colours of rounds 0..``depth``."""
        return self.counts[:, self.rounds <= depth]

    def columns(self, depth: int) -> np.ndarray:
        """Indices of the columns ``features(depth)`` keeps."""
        return np.flatnonzero(self.rounds <= depth)


def _check_level(subgraphs: list[np.ndarray], k: int) -> None:
    if k < GLOBAL:
        raise InputError(f"k must be >= 0 or {GLOBAL} (global), got {k}")
    for i, nodes in enumerate(subgraphs):
        if len(nodes) == 0:
            raise InputError(f"subgraph {i} has no nodes")


def _level_colours(
    graph: Graph, subgraphs: list[np.ndarray], k: int, rounds: int, palette: Palette
) -> list[np.ndarray]:
    """Per subgraph, the (rounds + 1, m) colours of its own nodes refined on its k-hop ball."""
    if k == GLOBAL:
        colours = refine(graph, rounds, palette)
        return [colours[:, np.asarray(nodes)] for nodes in subgraphs]
    rows = []
    for nodes in subgraphs:
        ball = graph.ball(np.asarray(nodes), k)
        colours = refine(graph.induced(ball), rounds, palette)
        rows.append(colours[:, : len(nodes)])  # the ball lists the subgraph's nodes first
    return rows


def subgraph_histograms(
    graph: Graph, subgraphs: list[np.ndarray], k: int, rounds: int
) -> LevelFeatures:
    """WL colour histograms (rounds 0..``rounds``) of each subgraph's nodes on its k-hop ball.

    ``k`` = 0: the induced subgraph; ``k`` = GLOBAL (-1): one refinement of the whole graph;
    any other k >= 1: the induced k-hop neighbourhood of the subgraph.
    """
    _check_level(subgraphs, k)
    palette = Palette()
    rows = _level_colours(graph, subgraphs, k, rounds, palette)
    size = len(palette)
    counts = np.stack([histogram(c, size).sum(axis=0) for c in rows])
    used = np.flatnonzero(counts.sum(axis=0) > 0)  # drop colours no subgraph node has
    rounds_of = np.asarray(palette.rounds, dtype=np.int64)[used]
    return LevelFeatures(k, counts[:, used], rounds_of, palette, used.astype(np.int64))


PALETTE_FORMAT = "edgekit-wlks-palette/1"


@dataclass
class FrozenLevel:
    """One level of a fitted model: ``keys[i]`` is the palette key of colour id i (every colour
    of rounds 0..depth the fit refined), ``columns[j]`` the colour id histogram column j counts."""

    k: int
    keys: list[tuple]
    columns: np.ndarray  # (F_l,) int64


@dataclass
class WLFeaturizer:
    """``KernelSVM`` inputs for subgraphs of any graph, from a fitted model's WL palettes.

    ``histograms(graph, subgraphs)`` refines every level with a copy of its fitted palette: a
    colour the fit saw gets its fitted id and is counted in its column; a colour it never saw
    gets a new id and is counted nowhere. On the fitted task's own subgraphs this reproduces the
    fitted histograms exactly.
    """

    depth: int
    levels: list[FrozenLevel]

    @classmethod
    def from_levels(cls, levels: list[LevelFeatures], depth: int) -> WLFeaturizer:
        """The palettes of ``levels`` (from ``subgraph_histograms``) cut to rounds 0..``depth``,
        colour ids renumbered densely; columns in ``LevelFeatures.features(depth)`` order."""
        frozen = []
        for f in levels:
            if f.palette is None or f.ids is None:
                raise InputError(f"level k={f.k} keeps no palette to freeze")
            rounds = np.asarray(f.palette.rounds, dtype=np.int64)
            keep = np.flatnonzero(rounds <= depth)
            remap = np.full(len(rounds), -1, dtype=np.int64)
            remap[keep] = np.arange(len(keep))  # monotone: sorted neighbour tuples stay sorted
            by_id = [None] * len(rounds)
            for key, i in f.palette.ids.items():
                by_id[i] = key
            keys: list[tuple] = []
            for i in keep:
                key = by_id[i]
                if key[0] == 0:
                    keys.append(key)
                else:
                    keys.append((key[0], int(remap[key[1]]), tuple(int(remap[c]) for c in key[2])))
            frozen.append(FrozenLevel(f.k, keys, remap[f.ids[f.rounds <= depth]]))
        return cls(depth, frozen)

    def histograms(self, graph: Graph, subgraphs: list[np.ndarray]) -> np.ndarray:
        """(N, F) float32 colour counts of ``subgraphs`` (node arrays of ``graph``), levels
        concatenated in order: the ``KernelSVM`` input layout."""
        parts = []
        for level in self.levels:
            _check_level(subgraphs, level.k)
            palette = Palette(
                {key: i for i, key in enumerate(level.keys)}, [int(key[0]) for key in level.keys]
            )
            rows = _level_colours(graph, subgraphs, level.k, self.depth, palette)
            column = np.full(len(palette), -1, dtype=np.int64)  # palette id -> column (-1: none)
            column[level.columns] = np.arange(len(level.columns))
            counts = np.zeros((len(subgraphs), len(level.columns)), dtype=np.float64)
            for n, colours in enumerate(rows):
                hit = column[colours.ravel()]
                counts[n] = np.bincount(hit[hit >= 0], minlength=len(level.columns))
            parts.append(counts)
        return np.concatenate(parts, axis=1).astype(np.float32)

    def to_json(self) -> dict:
        """A JSON-able dict: keys as [0, label] or [round, own, [neighbours]]."""
        return {
            "format": PALETTE_FORMAT,
            "depth": self.depth,
            "levels": [
                {
                    "k": level.k,
                    "keys": [
                        [k[0], k[1]] if k[0] == 0 else [k[0], k[1], list(k[2])] for k in level.keys
                    ],
                    "columns": level.columns.tolist(),
                }
                for level in self.levels
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> WLFeaturizer:
        """The featurizer ``to_json`` wrote; a malformed file is an InputError."""
        try:
            if data["format"] != PALETTE_FORMAT:
                raise InputError(
                    f"WL palette format {data['format']!r:.60}, expected {PALETTE_FORMAT}"
                )
            depth = int(data["depth"])
            levels = []
            for level in data["levels"]:
                keys: list[tuple] = []
                for key in level["keys"]:
                    if int(key[0]) == 0 and len(key) == 2:
                        keys.append((0, int(key[1])))
                    elif 0 < int(key[0]) <= depth and len(key) == 3:
                        keys.append((int(key[0]), int(key[1]), tuple(int(c) for c in key[2])))
                    else:
                        raise InputError(f"WL palette key {key!r:.60} is malformed")
                columns = np.asarray(level["columns"], dtype=np.int64).reshape(-1)
                if columns.size and not 0 <= columns.min() <= columns.max() < len(keys):
                    raise InputError("WL palette columns name colours outside the palette")
                levels.append(FrozenLevel(int(level["k"]), keys, columns))
        except InputError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"malformed WL palette: {exc!r:.120}") from exc
        return cls(depth, levels)


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
