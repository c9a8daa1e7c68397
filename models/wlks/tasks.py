"""SubGNN-style synthetic subgraph tasks on a planted graph: density, cut ratio, coreness, components.

The base graph is a preferential-attachment graph with dense communities planted in it (so core
numbers vary). Each task plants or samples ``count`` subgraphs and labels each by a structural
property cut into three classes (terciles) or, for components, the number of components:

- density: connected node sets with extra internal edges planted at a random rate; label =
  tercile of the induced subgraph's edge density (visible inside the subgraph, k = 0).
- cut_ratio: connected node sets with extra edges planted to random outside nodes; label =
  tercile of boundary edges / (|S| (n - |S|)) (visible only from outside, k = D).
- coreness: connected node sets; label = tercile of the mean core number of their nodes in the
  whole graph (a global property).
- components: 1, 2 or 3 connected pieces grown from far-apart seeds; label = number of
  components of the induced subgraph minus 1 (internal structure).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.wlks.graph import Graph, grow_connected, preferential_attachment

TASKS = ("density", "cut_ratio", "coreness", "components")


@dataclass
class SubgraphTask:
    """A graph, ``subgraphs`` (list of (m_i,) int64 node arrays) and their int ``labels`` (N,),
    split into train / val / test index arrays."""

    name: str
    graph: Graph
    subgraphs: list[np.ndarray]
    labels: np.ndarray
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    classes: int


def planted_graph(n: int, rng: np.random.Generator, communities: int = 12) -> Graph:
    """Preferential attachment (m = 2) on ``n`` nodes plus ``communities`` planted dense groups
    (8-16 nodes, edge probability 0.2-0.8) that raise core numbers unevenly."""
    base = preferential_attachment(n, 2, rng)
    extra: list[tuple[int, int]] = []
    for _ in range(communities):
        group = rng.choice(n, size=int(rng.integers(8, 17)), replace=False)
        p = float(rng.uniform(0.2, 0.8))
        extra += [
            (int(a), int(b))
            for i, a in enumerate(group)
            for b in group[i + 1 :]
            if rng.random() < p
        ]
    return base.with_edges(extra)


def _terciles(values: np.ndarray) -> np.ndarray:
    cuts = np.quantile(values, [1 / 3, 2 / 3])
    return np.digitize(values, cuts, right=True).astype(np.int64)


def _split(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = rng.permutation(count)
    a, b = int(0.6 * count), int(0.8 * count)
    return order[:a], order[a:b], order[b:]


def _sets(
    graph: Graph, count: int, rng: np.random.Generator, low: int, high: int
) -> list[np.ndarray]:
    return [grow_connected(graph, int(rng.integers(low, high + 1)), rng) for _ in range(count)]


def _components_sets(
    graph: Graph, count: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray]:
    subgraphs, labels = [], []
    while len(subgraphs) < count:
        pieces = int(rng.integers(1, 4))
        nodes = np.concatenate(
            [grow_connected(graph, int(rng.integers(3, 7)), rng) for _ in range(pieces)]
        )
        nodes = np.unique(nodes)
        found = graph.induced(nodes).components()
        if found == pieces:  # pieces that touched each other are redrawn
            subgraphs.append(rng.permutation(nodes))
            labels.append(pieces - 1)
    return subgraphs, np.array(labels, dtype=np.int64)


def make_task(name: str, count: int = 240, n: int = 500, seed: int = 0) -> SubgraphTask:
    """The task ``name`` (one of TASKS) with ``count`` subgraphs on an ``n``-node planted graph."""
    if name not in TASKS:
        raise InputError(f"unknown WLKS task '{name}'; expected one of {', '.join(TASKS)}")
    if count < 30 or n < 50:
        raise InputError(f"need count >= 30 and n >= 50, got count={count}, n={n}")
    rng = np.random.default_rng([seed, TASKS.index(name)])
    graph = planted_graph(n, rng)
    if name == "components":
        subgraphs, labels = _components_sets(graph, count, rng)
    else:
        subgraphs = _sets(graph, count, rng, 6, 12)
        extra: list[tuple[int, int]] = []
        if name == "density":
            for nodes in subgraphs:
                p = float(rng.choice([0.0, 0.2, 0.5]))
                extra += [
                    (int(a), int(b))
                    for i, a in enumerate(nodes)
                    for b in nodes[i + 1 :]
                    if rng.random() < p
                ]
        elif name == "cut_ratio":
            for nodes in subgraphs:
                per_node = int(rng.choice([0, 1, 3]))
                extra += [(int(v), int(rng.integers(n))) for v in nodes for _ in range(per_node)]
        graph = graph.with_edges(extra)
        if name == "density":
            values = np.array([graph.induced(s).density() for s in subgraphs])
        elif name == "cut_ratio":
            values = np.array([_cut_ratio(graph, s) for s in subgraphs])
        else:
            core = graph.core_numbers()
            values = np.array([core[s].mean() for s in subgraphs])
        labels = _terciles(values)
    train, val, test = _split(count, rng)
    return SubgraphTask(name, graph, subgraphs, labels, train, val, test, int(labels.max()) + 1)


def _cut_ratio(graph: Graph, nodes: np.ndarray) -> float:
    inside = set(int(v) for v in nodes)
    boundary = sum(int(u) not in inside for v in nodes for u in graph.adj[int(v)])
    return boundary / (len(nodes) * (graph.n - len(nodes)))
