"""Swaps that must not break a running pipeline: a bundle has to fit the pipelines that run
its name before it replaces the serving one, and a swap on which a pipeline fails on every
frame is rolled back by the daemon itself. Fit checks and the rollback watch in-process, then
both end to end against the real daemon process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import make_tiny_bundle
from daemon_proc import DaemonProcess

from edgekit.bundle.format import Bundle
from edgekit.daemon.client import DaemonError
from edgekit.daemon.metrics import DaemonMetrics, parse_prometheus
from edgekit.daemon.pipelines import BundleMisfitError, parse_pipelines
from edgekit.daemon.rollback import AutoRollback
from edgekit.daemon.store import BundleStore
from edgekit.segmentation import graphs as G

pytestmark = pytest.mark.slow

ROLLBACK_AFTER_S = 4.0


@pytest.fixture(scope="module")
def cnn_bundle() -> Path:
    from edgekit.lens.bench import bench_bundles

    return bench_bundles((("photo-cnn", "onnx-int8"),))["photo-cnn onnx-int8"].path


@pytest.fixture(scope="module")
def text_bundle() -> Path:
    from edgekit.lens.bench import bench_bundles

    return bench_bundles((("minilm", "onnx-int8"),))["minilm onnx-int8"].path


def size_bound_classifier(dest: Path, like: Path, work: Path, golden_size: int = 32) -> Path:
    """A classifier that states photo-cnn's task, labels and preprocessing and an image input
    (batch, 3, height, width) with dynamic spatial axes, but whose dense layer only takes
    ``golden_size`` x ``golden_size`` images: it passes its self-test on the golden input and
    fails at run time on any other frame size (the sim camera's frames are 64 x 64)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.bundle.format import BundleWriter, GraphEntry
    from edgekit.tensorspec import TensorSpec

    manifest = json.loads((like / "bundle.json").read_text())
    labels = manifest["labels"]
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3 * golden_size**2, len(labels))).astype(np.float32) * 0.01
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["image"], ["flat"], axis=1),  # (B, 3*H*W)
            helper.make_node("MatMul", ["flat", "W"], ["xw"]),  # needs H = W = golden_size
            helper.make_node("Add", ["xw", "b"], ["logits"]),  # (B, C)
        ],
        "size-bound-classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", len(labels)])],
        initializer=[
            numpy_helper.from_array(weight, "W"),
            numpy_helper.from_array(np.zeros(len(labels), np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    work.mkdir(parents=True, exist_ok=True)
    onnx.save(model, work / "classifier.onnx")
    x = rng.random((2, 3, golden_size, golden_size), dtype=np.float32)
    session = ort.InferenceSession(
        str(work / "classifier.onnx"), providers=["CPUExecutionProvider"]
    )
    (y,) = session.run(None, {"image": x})
    with BundleWriter(dest) as writer:
        rel = writer.add_file(work / "classifier.onnx", "graphs/classifier.onnx")
        golden = writer.add_golden("classifier", {"image": x}, {"logits": y}, {"logits": y})
        writer.add_graph(
            GraphEntry(
                "classifier", [rel], "onnx", "fp32",
                [TensorSpec("image", "float32", ("batch", 3, "h", "w"))],
                [TensorSpec("logits", "float32", ("batch", len(labels)))],
                golden, {"atol": 1e-5, "rtol": 1e-4},
            )
        )  # fmt: skip
        keep = ("model", "tier", "task", "labels", "preprocessing")
        writer.commit(
            {**{k: manifest[k] for k in keep}, "target": {"format": "onnx", "precision": "fp32"}}
        )
    return dest


# ---- fit checks, from manifests ------------------------------------------------------------
def _pipes(spec: str) -> dict:
    return {p.kind: p for p in parse_pipelines(spec)}


def test_classifier_bundles_fit_classify_and_lens_and_nothing_else_does(cnn_bundle, text_bundle):
    pipes = _pipes("classify,lens,sam2-stream")
    cnn, text = Bundle.load(cnn_bundle), Bundle.load(text_bundle)
    assert pipes["classify"].fits(cnn) == [] and pipes["lens"].fits(cnn) == []
    problems = pipes["classify"].fits(text)
    assert any("'sentence-embedding', not 'image-classification'" in p for p in problems)
    assert any("image (B, 3, H, W)" in p for p in problems), problems
    with pytest.raises(BundleMisfitError, match="does not fit pipeline 'classify'") as err:
        pipes["classify"].check_fits(text)
    assert err.value.problems == {"classify": problems}
    sam2 = pipes["sam2-stream"].fits(cnn)
    assert any("lacks ['image_encoder'" in p for p in sam2) and "task is" in sam2[0]


def _classifier(tmp_path: Path, cnn_bundle: Path, edit) -> Bundle:  # noqa: ANN001
    manifest = json.loads((cnn_bundle / "bundle.json").read_text())
    edit(manifest, manifest["graphs"]["classifier"])
    return Bundle(tmp_path, manifest)


@pytest.mark.parametrize(
    ("edit", "kind", "expected"),
    [
        (lambda m, g: m.update(labels=m["labels"][:7]), "classify", "10 classes but 7 labels"),
        (lambda m, g: g["inputs"][0].update(shape=["batch", 1, 64, 64]), "lens", "not 3 (RGB)"),
        (lambda m, g: g["inputs"][0].update(shape=[4, 3, 64, 64]), "classify", "needs batch 1"),
        (lambda m, g: g["inputs"][0].update(shape=[1, 3, 64, 64]), "lens", "dynamic batch"),
        (lambda m, g: g["outputs"][0].update(shape=["batch"]), "classify", "not float logits"),
        (lambda m, g: m["preprocessing"].update(layout="NHWC"), "lens", "layout is 'NHWC'"),
        (lambda m, g: g["inputs"][0].update(dtype="uint8"), "classify", "not a float32 image"),
    ],
)
def test_classifier_misfits_are_named(tmp_path, cnn_bundle, edit, kind, expected):
    problems = _pipes(kind)[kind].fits(_classifier(tmp_path, cnn_bundle, edit))
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_batch_one_classifier_fits_classify_but_not_lens(tmp_path, cnn_bundle):
    bundle = _classifier(
        tmp_path, cnn_bundle, lambda m, g: g["inputs"][0].update(shape=[1, 3, 64, 64])
    )
    pipes = _pipes("classify,lens")
    assert pipes["classify"].fits(bundle) == [] and pipes["lens"].fits(bundle)


def test_the_sam2_edge_bundle_fits_only_the_sam2_stream():
    from edgekit.segmentation.run import sam2_bundle

    bundle = sam2_bundle("sam2-edge")  # exported once into the edgekit cache (test_sam2_apps)
    pipes = _pipes("classify,lens,sam2-stream")
    assert pipes["sam2-stream"].fits(bundle) == []
    assert pipes["classify"].fits(bundle) and pipes["lens"].fits(bundle)


SAM2_DIMS = {"S": 64, "C": 16, "Cm": 8, "h": 4, "w": 4, "hm": 4, "wm": 4}


def _sam2(tmp_path: Path, edit=None, dims=SAM2_DIMS) -> Bundle:  # noqa: ANN001
    """A manifest stating the SAM 2 graph set at ``dims`` (F, P, N dynamic, as exported)."""
    sizes = {**dims, "F": "F", "P": "P", "N": "N"}

    def specs(table: dict, graph: str) -> list[dict]:
        return [
            {"name": t.name, "dtype": t.dtype, "shape": list(t.resolve(sizes))}
            for t in table[graph]
        ]

    graphs = {
        g: {"files": [f"graphs/{g}.onnx"], "format": "onnx", "precision": "fp32",
            "inputs": specs(G.GRAPH_INPUTS, g), "outputs": specs(G.GRAPH_OUTPUTS, g)}
        for g in G.GRAPH_NAMES
    }  # fmt: skip
    manifest = {"schema_version": 1, "model": "sam2-x", "task": "video-object-segmentation"}
    manifest.update(graphs=graphs, files={f"graphs/{g}.onnx": "0" * 64 for g in graphs})
    manifest["preprocessing"] = {"stream_config": {"num_maskmem": 7}}
    if edit:
        edit(manifest, graphs)
    return Bundle(tmp_path, manifest)


def _shape(graphs: dict, graph: str, side: str, name: str, shape: list) -> None:
    next(s for s in graphs[graph][side] if s["name"] == name)["shape"] = shape


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (None, None),
        (lambda m, g: [s.update(name=f"out{i}") for i, s in enumerate(g["memory_encoder"]["outputs"])], None),
        (lambda m, g: g.pop("memory_encoder"), "lacks ['memory_encoder']"),
        (lambda m, g: _shape(g, "mask_decoder", "inputs", "feat_s0", [1, 4, 16, 16]), "expected C/8 = 2"),
        (lambda m, g: _shape(g, "mask_decoder", "inputs", "mask_input", [1, 1, 8, 8]), "expected 4*h = 16"),
        (lambda m, g: _shape(g, "memory_encoder", "outputs", "mem_pos", [1, 8, 8, 4]), "expected hm = 4"),
        (lambda m, g: _shape(g, "image_encoder", "inputs", "image", [1, 3, "s", "s"]), "fixed square size S"),
        (lambda m, g: _shape(g, "image_encoder", "inputs", "image", [1, 3, 64, 32]), "expected S = 64"),
        (lambda m, g: g["mask_decoder"]["inputs"][4].update(dtype="float32"), "dtype or rank differs"),
        (lambda m, g: g["mask_decoder"]["inputs"].pop(), "the contract feeds"),
        (lambda m, g: g["mask_decoder"]["outputs"].pop(), "the contract expects"),
        (lambda m, g: m["preprocessing"]["stream_config"].update(warp=1), "does not know"),
        (lambda m, g: m.update(task="image-classification"), "not 'video-object-segmentation'"),
    ],
)  # fmt: skip
def test_sam2_stream_checks_the_graph_set_contract(tmp_path, edit, expected):
    problems = _pipes("sam2-stream")["sam2-stream"].fits(_sam2(tmp_path, edit))
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


# ---- the rollback watch, in-process --------------------------------------------------------
@pytest.fixture
def tiny_archive(tmp_path: Path) -> Path:
    from edgekit.bundle.archive import pack

    return pack(make_tiny_bundle(tmp_path / "b", tmp_path / "w"), tmp_path / "tiny.tar")


def _watch(
    tmp_path: Path, after_s: float
) -> tuple[BundleStore, AutoRollback, object, DaemonMetrics]:
    store, metrics = BundleStore(tmp_path / "store"), DaemonMetrics()
    (pipe,) = parse_pipelines("classify:tiny")
    return store, AutoRollback(store, metrics, [pipe], {pipe.name: {}}, after_s), pipe, metrics


def _serve(store: BundleStore, watch: AutoRollback, pipe, archive: Path) -> str:  # noqa: ANN001
    pipe.version = store.deploy("tiny", archive)["version"]
    watch.loaded(pipe)
    return pipe.version


def test_watch_rolls_back_only_a_deploy_that_never_worked(tmp_path, tiny_archive):
    store, watch, pipe, metrics = _watch(tmp_path, after_s=0.3)
    status = watch.statuses[pipe.name]
    good = _serve(store, watch, pipe, tiny_archive)
    watch.succeeded(pipe)  # a frame worked: the watch of the good version ends
    assert "auto_rollback_watch" not in status
    watch.failed(pipe, "later trouble")
    bad = _serve(store, watch, pipe, tiny_archive)
    assert status["auto_rollback_watch"]["version"] == bad
    assert watch.failed(pipe, "boom") is None  # not yet: before after_s
    time.sleep(0.35)
    event = watch.failed(pipe, "boom")
    assert event["from"] == bad and event["to"] == good and "all 2 frames" in event["reason"]
    assert status["auto_rollback"] == event and store.describe("tiny")["current"] == good
    history = store.describe("tiny")["history"][-1]
    assert history["event"] == f"auto-rollback from {bad}" and "boom" in history["reason"]
    text = metrics.render()[0].decode()
    assert parse_prometheus(text)['edgekit_auto_rollbacks_total{bundle="tiny"}'] == 1
    pipe.version = good  # the restored version is not watched: rollbacks never cascade
    watch.loaded(pipe)
    assert "auto_rollback_watch" not in status


def test_watch_keeps_a_version_with_nothing_to_go_back_to(tmp_path, tiny_archive):
    store, watch, pipe, _ = _watch(tmp_path, after_s=0.0001)
    only = _serve(store, watch, pipe, tiny_archive)
    time.sleep(0.01)
    event = watch.failed(pipe, "boom")
    assert event["to"] is None and "no previous version" in event["skipped"]
    assert store.describe("tiny")["current"] == only


def test_a_newer_swap_wins_over_a_pending_rollback(tmp_path, tiny_archive):
    store, watch, pipe, _ = _watch(tmp_path, after_s=0.0001)
    _serve(store, watch, pipe, tiny_archive)
    _serve(store, watch, pipe, tiny_archive)
    newest = store.deploy("tiny", tiny_archive)["version"]  # the pipeline has not reloaded yet
    time.sleep(0.01)
    assert watch.failed(pipe, "boom") is None
    assert store.describe("tiny")["current"] == newest


# ---- end to end: the real daemon -----------------------------------------------------------
def test_a_bundle_that_does_not_fit_is_refused_and_the_old_one_serves(
    tmp_path, cnn_bundle, text_bundle
):
    proc = DaemonProcess(
        tmp_path / "state", "--bundle", f"photo-cnn={cnn_bundle}", "--pipeline", "classify",
        "--fps", "15",
    ).start()  # fmt: skip
    try:
        with proc.client() as client:
            serving = client._call("GET", "/bundles/photo-cnn")["current"]
            with pytest.raises(DaemonError, match="HTTP 422") as err:
                client.deploy(text_bundle, "photo-cnn")
            assert "does not fit" in str(err.value) and "'sentence-embedding'" in str(err.value)
            assert client._call("GET", "/bundles/photo-cnn")["current"] == serving
            done = proc.health()["pipelines"]["classify"]["processed"]
            proc.wait_for(
                lambda h: h["pipelines"]["classify"]["processed"] > done + 5, what="frames"
            )
            out = client.deploy(cnn_bundle, "photo-cnn")  # a fitting bundle still deploys
            assert out["check"]["fits"] == ["classify"] and out["previous"] == [serving]
        assert proc.health()["pipelines"]["classify"]["errors"] == 0
    finally:
        proc.stop()


def test_a_swap_that_fails_on_every_frame_rolls_itself_back(tmp_path, cnn_bundle):
    bad = size_bound_classifier(tmp_path / "bad", cnn_bundle, tmp_path / "work")
    proc = DaemonProcess(
        tmp_path / "state", "--pipeline", "classify", "--fps", "15",
        "--rollback-after", str(ROLLBACK_AFTER_S),
    ).start()  # fmt: skip
    try:
        with proc.client() as client:
            good = client.deploy(cnn_bundle, "photo-cnn")["version"]
            proc.wait_for(lambda h: h["pipelines"]["classify"]["processed"] >= 5, what="frames")
            out = client.deploy(bad, "photo-cnn")  # fits and self-tests: it deploys
            swapped_at = time.monotonic()
            assert out["check"]["passed"] and out["check"]["fits"] == ["classify"]
            health = proc.wait_for(
                lambda h: "auto_rollback" in h["pipelines"]["classify"],
                timeout=ROLLBACK_AFTER_S + 15, what="the auto rollback",
            )  # fmt: skip
            took = time.monotonic() - swapped_at
            event = health["pipelines"]["classify"]["auto_rollback"]
            assert event["from"] == out["version"] and event["to"] == good
            reason = event["reason"].lower()  # the runtime's own words for the size mismatch
            assert "failed on all" in reason and ("matmul" in reason or "dimension" in reason)
            assert ROLLBACK_AFTER_S - 0.5 <= took <= ROLLBACK_AFTER_S + 10, took
            info = client._call("GET", "/bundles/photo-cnn")
            assert info["current"] == good and info["target"]["precision"] == "int8"
            assert info["history"][-1]["event"] == f"auto-rollback from {out['version']}"
            done = health["pipelines"]["classify"]["processed"]
            health = proc.wait_for(
                lambda h: h["pipelines"]["classify"]["processed"] > done + 5, what="frames again"
            )
            assert (
                health["status"] == "ok"
                and "auto_rollback_watch" not in health["pipelines"]["classify"]
            )
        m = parse_prometheus(httpx.get(f"{proc.url}/metrics").text)
        assert m['edgekit_auto_rollbacks_total{bundle="photo-cnn"}'] == 1
        assert m['edgekit_bundle_swaps_total{event="auto-rollback",name="photo-cnn"}'] == 1
        print(
            f"auto rollback seen {took:.1f} s after the bad swap (rollback after {ROLLBACK_AFTER_S} s)"
        )
    finally:
        assert proc.stop() in (0, -15)
    assert "Traceback" not in proc.log.read_text()
