"""Undirected graphs as adjacency lists, and the graph facts WLKS tasks are built from.

Numpy only (no networkx needed): a ``Graph`` holds ``adj[v]``, the sorted int64 neighbours of
node v. Helpers grow connected node sets, take induced subgraphs and k-hop balls, count
connected components and compute core numbers (k-core peeling).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass
class Graph:
    """An undirected simple graph on nodes 0..n-1; ``adj[v]`` is sorted (deg(v),) int64."""

    adj: list[np.ndarray]

    @property
    def n(self) -> int:
        return len(self.adj)

    @classmethod
    def from_edges(cls, n: int, edges: Iterable[tuple[int, int]]) -> Graph:
        """Graph on ``n`` nodes from (u, v) pairs; self-loops and duplicates are dropped."""
        sets: list[set[int]] = [set() for _ in range(n)]
        for u, v in edges:
            if not (0 <= u < n and 0 <= v < n):
                raise InputError(f"edge ({u}, {v}) names a node outside 0..{n - 1}")
            if u != v:
                sets[u].add(v)
                sets[v].add(u)
        return cls([np.array(sorted(s), dtype=np.int64) for s in sets])

    def edges(self) -> list[tuple[int, int]]:
        """Every edge once, as (u, v) with u < v."""
        return [(u, int(v)) for u in range(self.n) for v in self.adj[u] if u < v]

    def with_edges(self, extra: Iterable[tuple[int, int]]) -> Graph:
        """A copy with ``extra`` edges added."""
        return Graph.from_edges(self.n, [*self.edges(), *extra])

    def degrees(self) -> np.ndarray:
        """(n,) int64 node degrees."""
        return np.array([len(a) for a in self.adj], dtype=np.int64)

    def induced(self, nodes: np.ndarray) -> Graph:
        """The subgraph induced by ``nodes``; node i of the result is ``nodes[i]``."""
        index = {int(v): i for i, v in enumerate(nodes)}
        adj = []
        for v in nodes:
            local = [index[int(u)] for u in self.adj[int(v)] if int(u) in index]
            adj.append(np.array(sorted(local), dtype=np.int64))
        return Graph(adj)

    def ball(self, nodes: np.ndarray, k: int) -> np.ndarray:
        """Nodes within ``k`` hops of any of ``nodes``: ``nodes`` first (in order), then the rest
        sorted. ``k`` < 0 means the whole connected component(s)."""
        seen = {int(v): 0 for v in nodes}
        frontier = deque(int(v) for v in nodes)
        while frontier:
            v = frontier.popleft()
            if 0 <= k <= seen[v]:
                continue
            for u in self.adj[v]:
                if int(u) not in seen:
                    seen[int(u)] = seen[v] + 1
                    frontier.append(int(u))
        rest = sorted(set(seen) - {int(v) for v in nodes})
        return np.concatenate([np.asarray(nodes, dtype=np.int64), np.array(rest, dtype=np.int64)])

    def components(self) -> int:
        """Number of connected components."""
        label = np.full(self.n, -1, dtype=np.int64)
        count = 0
        for s in range(self.n):
            if label[s] >= 0:
                continue
            label[s] = count
            stack = [s]
            while stack:
                v = stack.pop()
                for u in self.adj[v]:
                    if label[u] < 0:
                        label[u] = count
                        stack.append(int(u))
            count += 1
        return count

    def core_numbers(self) -> np.ndarray:
        """(n,) int64 core number of every node: the largest k with v in the k-core."""
        degree = self.degrees().copy()
        core = np.zeros(self.n, dtype=np.int64)
        removed = np.zeros(self.n, dtype=bool)
        buckets: dict[int, set[int]] = {}
        for v, d in enumerate(degree):
            buckets.setdefault(int(d), set()).add(v)
        k = 0
        for _ in range(self.n):
            while not buckets.get(k):
                k += 1
            v = buckets[k].pop()
            core[v], removed[v] = k, True
            for u in self.adj[v]:
                u = int(u)
                if not removed[u] and degree[u] > k:
                    buckets[int(degree[u])].discard(u)
                    degree[u] -= 1
                    buckets.setdefault(int(degree[u]), set()).add(u)
        return core

    def density(self) -> float:
        """Edges / (n choose 2); 0 for fewer than two nodes."""
        pairs = self.n * (self.n - 1) / 2
        return float(sum(len(a) for a in self.adj) / 2 / pairs) if pairs else 0.0


def preferential_attachment(n: int, m: int, rng: np.random.Generator) -> Graph:
    """A Barabasi-Albert graph: each new node links to ``m`` distinct nodes chosen by degree."""
    if n <= m or m < 1:
        raise InputError(f"need n > m >= 1, got n={n}, m={m}")
    edges = [(i, j) for i in range(m + 1) for j in range(i + 1, m + 1)]
    ends = [v for e in edges for v in e]
    for v in range(m + 1, n):
        targets: set[int] = set()
        while len(targets) < m:
            targets.add(ends[int(rng.integers(len(ends)))])
        for u in targets:
            edges.append((v, u))
            ends += [v, u]
    return Graph.from_edges(n, edges)


def grow_connected(
    graph: Graph, size: int, rng: np.random.Generator, start: int | None = None
) -> np.ndarray:
    """A connected node set of up to ``size`` nodes grown from ``start`` by random frontier picks."""
    start = int(rng.integers(graph.n)) if start is None else start
    chosen = [start]
    members = {start}
    frontier = set(int(u) for u in graph.adj[start])
    while len(chosen) < size and frontier:
        v = sorted(frontier)[int(rng.integers(len(frontier)))]
        frontier.discard(v)
        chosen.append(v)
        members.add(v)
        frontier |= {int(u) for u in graph.adj[v]} - members
    return np.array(chosen, dtype=np.int64)
