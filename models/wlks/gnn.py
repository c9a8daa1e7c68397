"""The GNN baseline WLKS is timed against: a GIN on the whole graph, mean-pooled over each
subgraph's nodes, trained full-batch with Adam (epoch picked on validation micro-F1)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from edgekit.models.wlks.svm import micro_f1
from edgekit.models.wlks.tasks import SubgraphTask


class SubgraphGIN(nn.Module):
    """GIN layers over a dense adjacency, then mean pooling over subgraph nodes and a classifier.

    forward(features (n, 2), adjacency (n, n), pooling (N, n) row-normalised) -> logits (N, C).
    """

    def __init__(self, classes: int, hidden: int = 64, layers: int = 3) -> None:
        super().__init__()
        dims = [2] + [hidden] * layers
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b), nn.ReLU())
            for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.head = nn.Linear(hidden * layers, classes)

    def forward(
        self, features: torch.Tensor, adjacency: torch.Tensor, pooling: torch.Tensor
    ) -> torch.Tensor:
        h, pooled = features, []
        for layer in self.layers:
            h = layer(h + adjacency @ h)  # (n, hidden): GIN update with eps = 0
            pooled.append(pooling @ h)  # (N, hidden)
        return self.head(torch.cat(pooled, dim=1))


def graph_tensors(task: SubgraphTask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(features (n, 2): [1, degree / max degree], adjacency (n, n), pooling (N, n))."""
    n = task.graph.n
    adjacency = torch.zeros(n, n)
    for v, nbrs in enumerate(task.graph.adj):
        adjacency[v, torch.from_numpy(nbrs)] = 1.0
    degree = adjacency.sum(dim=1, keepdim=True)
    features = torch.cat([torch.ones(n, 1), degree / degree.max()], dim=1)
    pooling = torch.zeros(len(task.subgraphs), n)
    for i, nodes in enumerate(task.subgraphs):
        pooling[i, torch.from_numpy(nodes)] = 1.0 / len(nodes)
    return features, adjacency, pooling


@dataclass
class GNNResult:
    val_f1: float
    test_f1: float
    best_epoch: int
    seconds: float


def train_gnn(task: SubgraphTask, epochs: int = 100, lr: float = 1e-2, seed: int = 0) -> GNNResult:
    """Train ``SubgraphGIN`` for ``epochs`` full-batch steps; test micro-F1 at the best val epoch."""
    torch.manual_seed(seed)
    started = time.perf_counter()
    features, adjacency, pooling = graph_tensors(task)
    labels = torch.from_numpy(task.labels)
    model = SubgraphGIN(task.classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train = torch.from_numpy(task.train)
    best = (-1.0, 0.0, 0)
    for epoch in range(epochs):
        model.train()
        logits = model(features, adjacency, pooling)
        loss = nn.functional.cross_entropy(logits[train], labels[train])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            pred = model.eval()(features, adjacency, pooling).argmax(dim=1).numpy()
        val = micro_f1(pred[task.val], task.labels[task.val])
        if val > best[0]:
            best = (val, micro_f1(pred[task.test], task.labels[task.test]), epoch + 1)
    return GNNResult(best[0], best[1], best[2], time.perf_counter() - started)
