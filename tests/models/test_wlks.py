"""WLKS: WL refinement facts, the subgraph kernels, the SVM and its deployable module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.wlks.graph import Graph, preferential_attachment
from edgekit.models.wlks.method import fit_wlks
from edgekit.models.wlks.svm import OvRSVM, level_histograms
from edgekit.models.wlks.tasks import make_task
from edgekit.models.wlks.wl import (
    GLOBAL,
    Palette,
    WLFeaturizer,
    combined_kernel,
    histogram,
    linear_kernel,
    refine,
    subgraph_histograms,
)

torch.set_num_threads(1)


def _histograms(graphs: list[Graph], rounds: int) -> list[np.ndarray]:
    palette = Palette()
    colours = [refine(g, rounds, palette) for g in graphs]
    return [histogram(c, len(palette)) for c in colours]


def _classes(row: np.ndarray) -> set[frozenset[int]]:
    return {frozenset(np.flatnonzero(row == c).tolist()) for c in np.unique(row)}


def test_refinement_colour_classes_on_path_and_star() -> None:
    path = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)])
    colours = refine(path, 3, Palette())
    assert _classes(colours[1]) == {frozenset({0, 4}), frozenset({1, 2, 3})}
    assert _classes(colours[2]) == {frozenset({0, 4}), frozenset({1, 3}), frozenset({2})}
    star = Graph.from_edges(4, [(0, 1), (0, 2), (0, 3)])
    assert _classes(refine(star, 2, Palette())[2]) == {frozenset({0}), frozenset({1, 2, 3})}


def test_isomorphic_graphs_get_equal_histograms() -> None:
    rng = np.random.default_rng(0)
    graph = preferential_attachment(30, 2, rng)
    perm = rng.permutation(graph.n)
    relabelled = Graph.from_edges(graph.n, [(int(perm[u]), int(perm[v])) for u, v in graph.edges()])
    a, b = _histograms([graph, relabelled], 4)
    np.testing.assert_array_equal(a, b)


def test_non_isomorphic_pair_with_equal_degrees_separates_at_round_two() -> None:
    square_tail = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 0), (0, 4)])
    triangle_path = Graph.from_edges(5, [(0, 1), (1, 2), (2, 0), (0, 3), (3, 4)])
    a, b = _histograms([square_tail, triangle_path], 2)
    np.testing.assert_array_equal(a[1], b[1])  # same degree sequence (3, 2, 2, 2, 1)
    assert not np.array_equal(a[2], b[2])


def test_one_wl_cannot_separate_hexagon_from_two_triangles() -> None:
    hexagon = Graph.from_edges(6, [(i, (i + 1) % 6) for i in range(6)])
    triangles = Graph.from_edges(6, [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)])
    a, b = _histograms([hexagon, triangles], 4)
    np.testing.assert_array_equal(a, b)


def test_k0_sees_only_the_induced_subgraph_and_global_sees_the_boundary() -> None:
    # two triangles {0,1,2} and {3,4,5}; the second has two extra outside neighbours
    graph = Graph.from_edges(8, [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (3, 6), (4, 7)])
    subgraphs = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    k0 = subgraph_histograms(graph, subgraphs, 0, 2)
    kd = subgraph_histograms(graph, subgraphs, GLOBAL, 2)
    k1 = subgraph_histograms(graph, subgraphs, 1, 2)
    assert linear_kernel(k0.counts)[0, 1] == pytest.approx(1.0)
    assert linear_kernel(kd.counts)[0, 1] < 0.9
    assert linear_kernel(k1.counts)[0, 1] < 0.9
    assert k0.counts[:, k0.rounds == 0].sum(axis=1).tolist() == [3, 3]  # one count per node


def test_combined_kernel_is_psd_and_rejects_negative_weights() -> None:
    task = make_task("density", count=60, n=120, seed=1)
    grams = [
        linear_kernel(subgraph_histograms(task.graph, task.subgraphs, k, 3).counts)
        for k in (GLOBAL, 0)
    ]
    gram = combined_kernel(grams, [0.3, 0.7])
    assert np.linalg.eigvalsh(gram).min() > -1e-9
    np.testing.assert_allclose(np.diag(gram), 1.0)
    with pytest.raises(InputError, match=">= 0"):
        combined_kernel(grams, [1.0, -0.5])


def test_core_numbers_and_components_match_networkx() -> None:
    nx = pytest.importorskip("networkx")
    task = make_task("coreness", count=30, n=150, seed=2)
    ours = task.graph
    theirs = nx.Graph(ours.edges())
    theirs.add_nodes_from(range(ours.n))
    core = nx.core_number(theirs)
    np.testing.assert_array_equal(ours.core_numbers(), [core[v] for v in range(ours.n)])
    for nodes in task.subgraphs[:10]:
        induced = theirs.subgraph(nodes.tolist())
        assert ours.induced(nodes).components() == nx.number_connected_components(induced)


def test_svm_module_matches_the_precomputed_kernel_svm() -> None:
    task = make_task("components", count=90, n=200, seed=3)
    result = fit_wlks(task, "combined", depths=(1, 2))
    depth, weights = result.choice.depth, result.choice.weights
    test = task.test
    rows = combined_kernel(
        [
            linear_kernel(f.features(depth)[test], f.features(depth)[task.train])
            for f in result.levels
        ],
        list(weights),
    )
    expected = result.svm.decision(rows)
    with torch.no_grad():
        got = result.module()(
            torch.from_numpy(level_histograms(result.levels, depth, test))
        ).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert micro_f1_of(got.argmax(axis=1), task.labels[test]) == pytest.approx(
        result.choice.test_f1
    )


def micro_f1_of(pred: np.ndarray, labels: np.ndarray) -> float:
    return float((pred == labels).mean())


def test_global_kernel_beats_induced_kernel_on_cut_ratio() -> None:
    task = make_task("cut_ratio", seed=0)
    k0, kd = fit_wlks(task, "k0"), fit_wlks(task, "kD")
    assert kd.choice.val_f1 > k0.choice.val_f1 + 0.1
    assert kd.choice.test_f1 > k0.choice.test_f1 + 0.1
    assert {g["depth"] for g in kd.choice.grid} == {1, 2, 3, 4}  # depth was validated


def test_ovr_svm_separates_a_separable_kernel() -> None:
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = np.array([0, 0, 1, 1])
    svm = OvRSVM.fit(x @ x.T, labels, 2, cost=10.0)
    assert svm.predict(x @ x.T).tolist() == [0, 0, 1, 1]


def test_bad_inputs_are_typed_errors() -> None:
    with pytest.raises(InputError, match="unknown WLKS task"):
        make_task("diameter")
    with pytest.raises(InputError, match="unknown WLKS kernel"):
        fit_wlks(make_task("density", count=30, n=60), "k7")
    with pytest.raises(InputError, match="rounds"):
        refine(Graph.from_edges(2, [(0, 1)]), -1, Palette())
    with pytest.raises(InputError, match="outside"):
        Graph.from_edges(2, [(0, 2)])
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="wlks task"):
        get_card("wlks", task="diameter")


def test_card_graph_scores_match_its_svm_and_evaluate() -> None:
    from edgekit.build.verify import reference_runners
    from edgekit.registry import get_card

    card = get_card("wlks", count=90, n=200)
    metrics = card.evaluate(reference_runners(card))
    summary = card.train()
    assert metrics["micro_f1"] == pytest.approx(summary.test_micro_f1)
    assert summary.depth in (1, 2, 3, 4) and 0 < summary.global_weight < 1
    # the trivial baseline names the most common training label on every test subgraph
    task = card.fit().task
    common = np.bincount(task.labels[task.train]).argmax()
    assert metrics["majority_micro_f1"] == pytest.approx(np.mean(task.labels[task.test] == common))
    assert metrics["micro_f1_ci_low"] <= metrics["micro_f1"] <= metrics["micro_f1_ci_high"]
    assert metrics["micro_f1_ci_low"] < metrics["micro_f1_ci_high"]


def test_kept_palette_reproduces_the_fit_and_scores_subgraphs_of_an_unseen_graph() -> None:
    import json

    task = make_task("density", count=90, n=200, seed=0)
    result = fit_wlks(task, "combined", depths=(1, 2))
    featurizer = WLFeaturizer.from_json(json.loads(json.dumps(result.featurizer().to_json())))
    # on the task's own subgraphs the kept palette gives exactly the fitted histograms
    np.testing.assert_array_equal(
        featurizer.histograms(task.graph, task.subgraphs),
        result.histograms(np.arange(len(task.subgraphs))),
    )
    # another planted graph (another seed), never refined during the fit
    unseen = make_task("density", count=90, n=200, seed=10)
    with torch.no_grad():
        scores = result.module()(
            torch.from_numpy(featurizer.histograms(unseen.graph, unseen.subgraphs))
        ).numpy()
    majority = np.bincount(unseen.labels).max() / len(unseen.labels)  # 0.37 here
    assert micro_f1_of(scores.argmax(axis=1), unseen.labels) > majority + 0.1  # 0.58 measured
    # a colour the fit never saw counts for nothing: an isolated node (every graph and subgraph
    # of the fit is connected) keeps its round-0 colour, its round-1 colour is new
    counts = featurizer.histograms(Graph.from_edges(1, []), [np.array([0])])
    assert counts.sum() == len(featurizer.levels)
    with pytest.raises(InputError, match="palette"):
        WLFeaturizer.from_json({"format": "something else", "depth": 1, "levels": []})


def test_card_ships_the_palette_as_a_bundle_asset() -> None:
    import json
    from pathlib import Path

    from edgekit.registry import get_card

    card = get_card("wlks", count=90, n=200)
    assets = card.assets()
    assert card.preprocessing()["palette"] in assets
    featurizer = WLFeaturizer.from_json(json.loads(Path(assets["wl_palette.json"]).read_text()))
    task = card.fit().task
    np.testing.assert_array_equal(
        featurizer.histograms(task.graph, [task.subgraphs[i] for i in task.test[:4]]),
        card.golden_inputs()["svm"]["histograms"],
    )
