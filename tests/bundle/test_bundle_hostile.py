"""A bundle is untrusted data: hostile manifests, graphs and archives are refused, nothing leaks.

Each test builds the hostile input on disk (re-signing checksums where the attack needs it, so
only the new check can catch it). Archives and the CLI: test_archive_hostile.py; golden I/O
and tolerances: test_selftest_hostile.py; property-based tests: test_bundle_hostile_props.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.bundle import guard as bundle_guard
from edgekit.bundle.format import MANIFEST, Bundle, BundleWriter, GraphEntry, sha256_file
from edgekit.bundle.policy import DISABLE_OPTIMIZERS_KEY
from edgekit.bundle.selftest import selftest
from edgekit.errors import BundleError, InputError
from edgekit.tensorspec import TensorSpec

FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def _manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST).read_text())


def _write_manifest(path: Path, data: dict, resign: bool = True) -> None:
    if resign:
        data["files"] = {rel: sha256_file(path / rel) for rel in data["files"]}
    (path / MANIFEST).write_text(json.dumps(data))


def make_external_bundle(dest: Path, work: Path) -> Path:
    """The tiny bundle with its weights W and b stored as ONNX external data beside the graph:
    graphs/tiny.onnx + graphs/tiny.onnx.data, both listed."""
    import onnx
    import onnxruntime as ort
    from conftest import write_tiny_onnx

    work.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(write_tiny_onnx(work / "plain.onnx")))
    onnx.save_model(
        model,
        str(work / "tiny.onnx"),
        save_as_external_data=True,
        location="tiny.onnx.data",
        size_threshold=0,
    )
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    session = ort.InferenceSession(str(work / "tiny.onnx"), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x})
    with BundleWriter(dest) as writer:
        rels = [
            writer.add_file(work / "tiny.onnx", "graphs/tiny.onnx"),
            writer.add_file(work / "tiny.onnx.data", "graphs/tiny.onnx.data"),
        ]
        golden = writer.add_golden("main", {"x": x}, {"y": y}, {"y": y})
        specs = (
            [TensorSpec("x", "float32", ("batch", 4))],
            [TensorSpec("y", "float32", ("batch", 3))],
        )
        writer.add_graph(GraphEntry("main", rels, "onnx", "fp32", *specs, golden, {"atol": 1e-5}))
        writer.commit({"model": "tiny-ext", "target": {"format": "onnx", "precision": "fp32"}})
    return dest


def _relocate(bundle: Path, location: str) -> None:
    """Point every external tensor of graphs/tiny.onnx at ``location``; re-sign the bundle."""
    import onnx

    path = bundle / "graphs" / "tiny.onnx"
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(path))
    _write_manifest(bundle, _manifest(bundle))


@pytest.fixture
def ext_bundle(tmp_path: Path) -> Path:
    return make_external_bundle(tmp_path / "ext-bundle", tmp_path / "work")


@pytest.fixture(params=["onnx", "wire"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Call it once the hostile bundle is built: "wire" then runs the checks as on a device
    without the onnx package (the protobuf wire-format walker), "onnx" with it."""

    def activate() -> None:
        if request.param == "wire":
            monkeypatch.setitem(sys.modules, "onnx", None)
        else:
            monkeypatch.setattr(bundle_guard, "PARSE_WITH_ONNX", True)

    return activate


@pytest.fixture
def no_ort_session(monkeypatch: pytest.MonkeyPatch) -> list:
    """Record (and refuse) any InferenceSession: a refused bundle must never reach ONNX Runtime."""
    import onnxruntime as ort

    calls: list = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise AssertionError("ONNX Runtime was asked to load a refused graph")

    monkeypatch.setattr(ort, "InferenceSession", refuse)
    return calls


# ---- (a) the exfiltration attempt ----------------------------------------------------------
def test_listed_external_data_still_loads_and_selftests(ext_bundle: Path, parser) -> None:
    parser()
    bundle = Bundle.load(ext_bundle)
    assert bundle.graph().files == ["graphs/tiny.onnx", "graphs/tiny.onnx.data"]
    assert selftest(str(ext_bundle)).passed


def test_external_folder_session_option_is_refused(
    ext_bundle: Path, parser, no_ort_session: list
) -> None:
    _relocate(ext_bundle, "passwd")
    m = _manifest(ext_bundle)
    m["graphs"]["main"]["details"]["ort_session_config"] = {FOLDER_KEY: "/etc"}
    _write_manifest(ext_bundle, m)
    parser()
    with pytest.raises(
        BundleError, match=rf"sets '{FOLDER_KEY}'.*allowed keys.*{DISABLE_OPTIMIZERS_KEY}"
    ):
        Bundle.load(ext_bundle)
    with pytest.raises(BundleError, match=FOLDER_KEY):
        selftest(str(ext_bundle))
    m["graphs"]["main"]["details"] = {}  # the graph alone still names an unlisted file
    _write_manifest(ext_bundle, m)
    with pytest.raises(BundleError, match=r"external data from 'passwd' \('graphs/passwd'\)"):
        selftest(str(ext_bundle))
    assert no_ort_session == []


@pytest.mark.parametrize(
    ("location", "match"),
    [
        ("../../../../../../etc/passwd", "points outside the bundle"),
        ("/etc/passwd", "is absolute"),
        ("*/_ORT_MEM_ADDR_/*", "does not list"),  # ONNX Runtime's read-process-memory tag
        ("../golden/main.npz", "resolves|does not list|outside"),
        ("sub\\..\\..\\x", "backslash"),
    ],
)
def test_external_data_outside_the_bundle_is_refused(
    ext_bundle: Path, parser, no_ort_session: list, location: str, match: str
) -> None:
    _relocate(ext_bundle, location)
    parser()
    with pytest.raises(BundleError, match=match):
        Bundle.load(ext_bundle)
    with pytest.raises(BundleError, match=match):
        selftest(str(ext_bundle))
    # without the load-time checks, the session still refuses before ONNX Runtime sees the file
    with pytest.raises(BundleError, match=match):
        Bundle.load(ext_bundle, verify_checksums=False).session()
    assert no_ort_session == []


def _external(name: str, location: str | None) -> object:
    from onnx import TensorProto, numpy_helper

    tensor = numpy_helper.from_array(np.ones(3, np.float32), name)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    if location is not None:
        tensor.external_data.add(key="location", value=location)
        tensor.external_data.add(key="offset", value="0")
    return tensor


def test_both_parsers_find_external_data_wherever_onnx_allows_it(tmp_path: Path) -> None:
    """Initializers, sparse initializers, Constant attributes, If subgraphs, function bodies,
    training info and a tensor marked EXTERNAL without a location: the wire-format walker and
    onnx agree, and both read a file with a misleading extension as binary protobuf."""
    import onnx
    from onnx import TensorProto, helper

    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    branch = helper.make_graph(
        [helper.make_node("Identity", ["sub_w"], ["y"])], "b", [], [y], [_external("sub_w", "s")]
    )
    sparse = helper.make_sparse_tensor(_external("sv", "sparse.bin"), _external("si", None), [3])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=_external("const", "../../etc/passwd")),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
    ]
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    graph = helper.make_graph(nodes, "g", [cond], [y], [_external("w", "w.bin")], [], [], [sparse])
    fn_node = helper.make_node("Constant", [], ["o"], value=_external("fn_c", "/abs"))
    function = helper.make_function(
        "local", "f", [], ["o"], [fn_node], [helper.make_opsetid("", 17)]
    )
    model = helper.make_model(graph, functions=[function])
    model.training_info.add().initialization.CopyFrom(
        helper.make_graph([], "init", [], [], [_external("t", "*/_ORT_MEM_ADDR_/*")])
    )
    expected = [
        ("const", "../../etc/passwd"),
        ("fn_c", "/abs"),
        ("si", None),
        ("sub_w", "s"),
        ("sub_w", "s"),
        ("sv", "sparse.bin"),
        ("t", "*/_ORT_MEM_ADDR_/*"),
        ("w", "w.bin"),
    ]
    for name in ("m.onnx", "m.json", "m.txtpb"):
        onnx.save_model(model, str(tmp_path / name), format="protobuf")
        for use_onnx in (True, False):
            found = bundle_guard.external_data_locations(tmp_path / name, use_onnx=use_onnx)
            assert sorted(found, key=str) == expected, (name, use_onnx)
    (tmp_path / "cut.onnx").write_bytes((tmp_path / "m.onnx").read_bytes()[:-7])
    for use_onnx in (True, False):
        with pytest.raises(BundleError, match="not a valid ONNX model"):
            bundle_guard.external_data_locations(tmp_path / "cut.onnx", use_onnx=use_onnx)


def test_external_data_through_a_symlink_is_refused(ext_bundle: Path) -> None:
    data = ext_bundle / "graphs" / "tiny.onnx.data"
    outside = ext_bundle.parent / "secret.bin"
    outside.write_bytes(data.read_bytes())
    data.unlink()
    data.symlink_to(outside)
    with pytest.raises(BundleError, match="symbolic link|outside the bundle"):
        Bundle.load(ext_bundle)


def test_callers_cannot_move_the_external_data_folder(tiny_bundle: Path) -> None:
    bundle = Bundle.load(tiny_bundle)
    for key in (FOLDER_KEY, "ep.context_file_path", "session.collect_node_memory_stats_to_file"):
        with pytest.raises(InputError, match=f"'{key}' names a file or folder"):
            bundle.session(extra={"session_config": {key: "/etc"}})


def test_the_fusion_session_option_is_allowed_and_checked(tiny_bundle: Path) -> None:
    m = _manifest(tiny_bundle)
    m["graphs"]["main"]["details"]["ort_session_config"] = {
        DISABLE_OPTIMIZERS_KEY: "SkipLayerNormFusion, GeluFusion"
    }
    _write_manifest(tiny_bundle, m)
    assert selftest(str(tiny_bundle)).passed
    for bad in ("SkipLayerNormFusion\n/etc", "", "a b", 3, ["x"]):
        m["graphs"]["main"]["details"]["ort_session_config"] = {DISABLE_OPTIMIZERS_KEY: bad}
        _write_manifest(tiny_bundle, m)
        with pytest.raises(BundleError, match="optimizer names"):
            Bundle.load(tiny_bundle)


# ---- manifest fields that reach apps and paths -----------------------------------------------
@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m.update(schema_version="1"), "schema_version '1'"),
        (lambda m: m.update(schema_version=True), "schema_version True"),
        (lambda m: m.update(graphs=[]), "lists no graphs"),
        (lambda m: m["graphs"].update(main=[]), "must be an object"),
        (lambda m: m.update(files=["graphs/tiny.onnx"]), "checksum table"),
        (lambda m: m["files"].update({"x": 5}), "expected 64 hex"),
        (lambda m: m["graphs"]["main"].update(files="graphs/tiny.onnx"), "non-empty list"),
        (lambda m: m["graphs"]["main"].update(files=[]), "non-empty list"),
        (lambda m: m["graphs"]["main"].update(files=[7]), "path string"),
        (lambda m: m["graphs"]["main"].update(format=None), "'format' must be"),
        (lambda m: m["graphs"]["main"].update(files=["golden/main.npz"]), "ends in .onnx"),
        (lambda m: m["graphs"]["main"].update(inputs="x"), "inputs: must be a list"),
        (lambda m: m["graphs"]["main"]["inputs"][0].update(shape=[1.5]), "dim 1.5"),
        (lambda m: m["graphs"]["main"]["inputs"][0].update(dtype="V9999999"), "dtype"),
        (lambda m: m["graphs"]["main"].update(golden="/etc/passwd"), "absolute"),
        (lambda m: m["graphs"]["main"].update(golden="golden/other.npz"), "no recorded checksum"),
        (lambda m: m["graphs"]["main"].update(details=[1]), "'details' must be an object"),
        (lambda m: m.update(target=["onnx"]), "'target' must be dict"),
        (lambda m: m.update(labels="abc"), "labels must be a list"),
        (lambda m: m.update(preprocessing={"tokenizer": "../../etc/passwd"}), "plain file name"),
        (lambda m: m.update(preprocessing={"tokenizer": "tok.json"}), "not a listed file"),
        (lambda m: m.update(preprocessing={"max_length": "128"}), "max_length"),
        (lambda m: m.update(source={"options": [1]}), "options"),
    ],
)
def test_malformed_manifest_types_are_bundle_errors(tiny_bundle: Path, edit, match: str) -> None:
    m = _manifest(tiny_bundle)
    edit(m)
    _write_manifest(tiny_bundle, m, resign=False)
    with pytest.raises(BundleError, match=match):
        Bundle.load(tiny_bundle)


def test_stream_config_of_the_wrong_type_is_a_bundle_error(tiny_bundle: Path) -> None:
    from edgekit.segmentation.run import bundle_stream_config

    bundle = Bundle.load(tiny_bundle)
    bundle.graphs["image_encoder"] = bundle.graph("main")  # the encoder's input fixes the size
    bundle.graph().inputs = [TensorSpec("image", "float32", (1, 3, 64, 64))]
    bundle.manifest["preprocessing"] = {"stream_config": {"num_maskmem": 7}}
    assert bundle_stream_config(bundle).num_maskmem == 7
    bundle.manifest["preprocessing"] = {"stream_config": {"num_maskmem": "seven"}}
    with pytest.raises(BundleError, match="stream options of the wrong type"):
        bundle_stream_config(bundle)


def test_deeply_nested_and_huge_json_are_bundle_errors(tiny_bundle: Path) -> None:
    m = _manifest(tiny_bundle)
    (tiny_bundle / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BundleError, match="not valid JSON: RecursionError"):
        Bundle.load(tiny_bundle)
    m["report"] = {"a": json.loads("[" * 80 + "]" * 80)}
    _write_manifest(tiny_bundle, m, resign=False)
    with pytest.raises(BundleError, match="deeper than 64"):
        Bundle.load(tiny_bundle)
    (tiny_bundle / MANIFEST).write_text('{"schema_version": 1, "n": ' + "9" * 5000 + "}")
    with pytest.raises(BundleError, match="not valid JSON"):
        Bundle.load(tiny_bundle)


def test_unlisted_files_in_a_bundle_folder_are_refused(tiny_bundle: Path) -> None:
    (tiny_bundle / "graphs" / "extra.onnx").write_bytes(b"not listed")
    with pytest.raises(BundleError, match="'graphs/extra.onnx' is in the bundle folder but not"):
        Bundle.load(tiny_bundle)
    (tiny_bundle / "graphs" / "extra.onnx").unlink()
    (tiny_bundle / "assets").mkdir()
    (tiny_bundle / "assets" / "link").symlink_to("/etc/passwd")
    with pytest.raises(BundleError, match="'assets/link' is a symbolic link"):
        Bundle.load(tiny_bundle)
