"""End to end: the real daemon process over loopback HTTP — health, metrics, pipelines, token,
deploy + self-test + swap, rollback, corrupt and hostile archives, slow clients, remote bench,
text scoring."""

from __future__ import annotations

import io
import json
import socket
import tarfile
import time
from pathlib import Path

import httpx
import pytest
from daemon_proc import DaemonProcess

from edgekit.daemon.client import DaemonError
from edgekit.daemon.metrics import parse_prometheus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundles() -> dict[str, Path]:
    from edgekit.lens.bench import bench_bundles

    built = bench_bundles((("photo-cnn", "onnx-fp32"), ("photo-cnn", "onnx-int8")))
    return {"fp32": built["photo-cnn onnx-fp32"].path, "int8": built["photo-cnn onnx-int8"].path}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, bundles):
    state = tmp_path_factory.mktemp("daemon") / "state"
    proc = DaemonProcess(
        state, "--bundle", f"photo-cnn={bundles['int8']}", "--pipeline", "lens,classify",
        "--fps", "30",
    )  # fmt: skip
    proc.start()
    yield proc
    proc.stop_clean()


def test_health_metrics_and_pipelines(daemon):
    health = daemon.wait_for(
        lambda h: all(p["processed"] >= 3 for p in h["pipelines"].values()), what="3 results"
    )
    assert health["status"] == "ok" and health["camera"]["connected"]
    assert health["bundles"] == ["photo-cnn"]
    assert health["profile"]["name"] == "x86-cpu"
    assert health["pipelines"]["classify"]["runtime"] == "onnxruntime"
    text = httpx.get(f"{daemon.url}/metrics").text
    m = parse_prometheus(text)
    assert m["edgekit_frames_total"] >= 3
    assert m['edgekit_frames_processed_total{pipeline="lens"}'] >= 3
    assert m['edgekit_capture_to_decision_seconds_count{pipeline="classify"}'] >= 3
    assert 'edgekit_stage_seconds_bucket{le="0.01",pipeline="lens",stage="infer"}' in text
    assert m["edgekit_rss_bytes"] > 10e6
    assert 'edgekit_queue_depth{pipeline="lens"}' in m
    lens = httpx.get(f"{daemon.url}/pipelines/lens/latest").json()["latest"]
    assert lens["result"]["captures"] >= 1 and lens["result"]["label"]
    assert lens["frame_timestamp_s"] > 0 and "settings" in lens["result"]
    classify = httpx.get(f"{daemon.url}/pipelines/classify/latest").json()["latest"]
    assert 0 < classify["result"]["prob"] <= 1
    missing = httpx.get(f"{daemon.url}/pipelines/nope/latest")
    assert missing.status_code == 404 and "lens" in missing.json()["detail"]
    frame = httpx.get(f"{daemon.url}/frame.png")
    assert frame.status_code == 200 and frame.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_token_required_and_private(daemon, bundles):
    mode = (daemon.state_dir / "token").stat().st_mode & 0o777
    assert mode == 0o600
    for method, path in (
        ("PUT", "/bundles/x"),
        ("POST", "/bundles/x/rollback"),
        ("POST", "/bench"),
    ):
        r = httpx.request(method, daemon.url + path, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401, (method, path, r.text)


def test_deploy_swap_and_rollback(daemon, bundles):
    with daemon.client() as client:
        before = client._call("GET", "/bundles/photo-cnn")
        processed = daemon.health()["pipelines"]["classify"]["processed"]
        out = client.deploy(bundles["fp32"], "photo-cnn")
        assert out["check"]["passed"] and out["previous"][0] == before["current"]
        after = client._call("GET", "/bundles/photo-cnn")
        assert after["current"] == out["version"] and after["target"]["precision"] == "fp32"
        # the pipelines pick the new bundle up and keep going
        daemon.wait_for(
            lambda h: h["pipelines"]["classify"]["processed"] > processed + 5, what="frames"
        )
        back = client.rollback("photo-cnn")
        assert back["version"] == before["current"]
        assert client._call("GET", "/bundles/photo-cnn")["target"]["precision"] == "int8"
    m = parse_prometheus(httpx.get(f"{daemon.url}/metrics").text)
    assert m['edgekit_bundle_swaps_total{event="rollback",name="photo-cnn"}'] >= 1


def _tar_bytes(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def _bundle_members(bundle_dir: Path) -> dict[str, bytes]:
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    files = {rel: (bundle_dir / rel).read_bytes() for rel in manifest["files"]}
    return {"bundle.json": (bundle_dir / "bundle.json").read_bytes(), **files}


def _put(daemon, name: str, data: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {daemon.token}"}
    return httpx.put(f"{daemon.url}/bundles/{name}", content=data, headers=headers, timeout=60)


def test_bad_archives_keep_the_old_bundle(daemon, bundles):
    serving = httpx.get(f"{daemon.url}/bundles/photo-cnn").json()["current"]
    members = _bundle_members(bundles["fp32"])
    graph = next(k for k in members if k.endswith(".onnx"))
    corrupt = dict(members)
    corrupt[graph] = corrupt[graph][:-10] + b"0123456789"
    r = _put(daemon, "photo-cnn", _tar_bytes(corrupt))
    assert r.status_code == 422 and "sha256" in r.json()["detail"]
    r = _put(daemon, "photo-cnn", _tar_bytes({**members, "../evil.txt": b"x"}))
    assert r.status_code == 422 and "parent path" in r.json()["detail"]
    r = _put(daemon, "photo-cnn", _tar_bytes(members, links={"graphs/link.onnx": "/etc/passwd"}))
    assert r.status_code == 422 and "link" in r.json()["detail"]
    manifest = json.loads(members["bundle.json"])
    manifest["schema_version"] = 999
    r = _put(
        daemon, "photo-cnn", _tar_bytes({**members, "bundle.json": json.dumps(manifest).encode()})
    )
    assert r.status_code == 422 and "schema_version" in r.json()["detail"]
    r = _put(daemon, "photo-cnn", b"this is not a tar archive")
    assert r.status_code == 422
    r = _put(daemon, "../etc", _tar_bytes(members))
    assert r.status_code in (400, 404)
    assert httpx.get(f"{daemon.url}/bundles/photo-cnn").json()["current"] == serving
    assert not list((daemon.state_dir / "uploads").iterdir())
    versions = daemon.state_dir / "bundles" / "photo-cnn" / "versions"
    assert all(not p.name.startswith(".") for p in versions.iterdir())
    with daemon.client() as client, pytest.raises(DaemonError, match="no previous|rollback"):
        client.rollback("never-deployed")


def test_slow_client_does_not_block_and_partial_upload_is_dropped(daemon, bundles):
    serving = httpx.get(f"{daemon.url}/bundles/photo-cnn").json()["current"]
    sock = socket.create_connection(("127.0.0.1", daemon.port))
    head = (
        f"PUT /bundles/photo-cnn HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.token}\r\n"
        "Content-Type: application/x-tar\r\nContent-Length: 1000000\r\n\r\n"
    )
    sock.sendall(head.encode() + b"\0" * 5000)  # then stall: a slow / dead client
    time.sleep(0.5)
    start = time.monotonic()
    assert httpx.get(f"{daemon.url}/health", timeout=5).status_code == 200
    assert time.monotonic() - start < 4.0  # a blocked loop would hit the 5 s timeout
    assert len(list((daemon.state_dir / "uploads").iterdir())) == 1  # being received
    sock.close()  # the client goes away mid-upload
    deadline = time.monotonic() + 10
    while list((daemon.state_dir / "uploads").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list((daemon.state_dir / "uploads").iterdir())
    assert httpx.get(f"{daemon.url}/bundles/photo-cnn").json()["current"] == serving


def test_remote_bench_returns_the_local_schema(daemon):
    with daemon.client() as client:
        report = client.bench("photo-cnn", config={"iterations": 20, "warmup": 2})
    assert report["schema"] == "edgekit.bench.engine/1" and report["pipelines_paused"]
    (row,) = report["results"]
    assert row["status"] == "ok" and row["latency_ms"]["p50"] > 0 and row["iterations"] == 20
    assert report["environment"]["cpu"]["cores"]["logical"] >= 1


def test_cross_device_bench_cli(daemon, bundles, tmp_path):
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    out = tmp_path / "x.json"
    result = CliRunner().invoke(
        app,
        ["bench", str(bundles["int8"]), "--device", daemon.address, "--device", "local",
         "--iterations", "10", "--warmup", "1", "--token", daemon.token, "--json", str(out),
         "--plot", str(tmp_path / "x.png")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    devices = {r["device"] for r in report["results"]}
    assert devices == {"local/cpu", f"{daemon.address}/cpu"}
    assert set(report["device_environments"]) == {"local", daemon.address}
    assert (tmp_path / "x.png").stat().st_size > 1000
    assert "across devices" in result.output


def test_score_text_bundle(daemon):
    from edgekit.lens.bench import bench_bundles

    minilm = bench_bundles((("minilm", "onnx-int8"),))["minilm onnx-int8"]
    with daemon.client() as client:
        client.deploy(minilm.path, "minilm")
        out = client.score(
            "minilm", pairs=[["A man is playing a guitar.", "Someone plays the guitar."],
                             ["A man is playing a guitar.", "The stock market fell sharply."]],
        )  # fmt: skip
        assert out["cosine"][0] > 0.7 > out["cosine"][1]
        assert out["paraphrase"] == [True, False]
        with pytest.raises(DaemonError, match="texts"):
            client.score("minilm", texts=[])
        with pytest.raises(DaemonError, match="not a text model"):
            client.score("photo-cnn", texts=["hello"])


def test_score_moderation_bundle(daemon):
    from edgekit.lens.bench import bench_bundles

    guard = bench_bundles((("bingoguard", "onnx-int8"),))["bingoguard onnx-int8"]
    texts = ["The capital of France is Paris.", "word " * 400]
    with daemon.client() as client:
        client.deploy(guard.path, "bingoguard")
        out = client.score("bingoguard", texts=texts)
        # the query+response scorer: [query, response] pairs; "" = the response alone
        # (one text per request: dynamic int8 scales depend on the batch's padding)
        asked = client.score("bingoguard", pairs=[["What is the capital of France?", texts[0]]])
        empty = client.score("bingoguard", pairs=[["", texts[0]]])
        alone = client.score("bingoguard", texts=texts[:1])
        with pytest.raises(DaemonError, match=r"pairs\[0\]"):
            client.score("bingoguard", pairs=[["a question"]])
    assert empty["p_unsafe"] == pytest.approx(alone["p_unsafe"], abs=1e-6)
    assert asked["unsafe"] == [False] and len(asked["severity"]) == 1
    assert set(out) >= {"p_unsafe", "unsafe", "topic", "severity", "severity_probs", "truncated"}
    assert out["p_unsafe"][0] < out["threshold"] and out["unsafe"][0] is False
    assert out["truncated"] == [False, True]
    assert all(0 <= lvl <= 4 for lvl in out["severity"]) and out["topic"][1].startswith("S")


def test_deploy_model_name_uses_the_device_profile(daemon):
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    result = CliRunner().invoke(
        app, ["deploy", "photo-cnn", "--to", daemon.address, "--name", "cnn-auto",
              "--token", daemon.token],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "profile picks onnx-int8" in result.output
    info = httpx.get(f"{daemon.url}/bundles/cnn-auto").json()
    assert info["target"]["format"] == "onnx" and info["target"]["precision"] == "int8"
    bad = CliRunner().invoke(app, ["deploy", "no-such-model", "--to", daemon.address])
    assert bad.exit_code == 2 and "neither a bundle directory nor a model" in bad.output


def test_lens_prior_reaches_the_daemons_lens_pipeline(tmp_path, bundles):
    import numpy as np

    from edgekit.daemon.serve import serve
    from edgekit.errors import InputError
    from edgekit.lens.controller import paper_grid
    from edgekit.lens.prior import SettingPrior

    settings = [s.describe() for s in paper_grid()]
    prior = SettingPrior(np.linspace(0.1, 0.9, 27), 1.0, settings, variant="top1-flip")
    path = prior.save(tmp_path / "prior.json")
    proc = DaemonProcess(
        tmp_path / "state", "--bundle", f"photo-cnn={bundles['fp32']}", "--pipeline", "lens",
        "--fps", "30", "--lens-prior", str(path),
    )  # fmt: skip
    proc.start()
    try:
        proc.wait_for(lambda h: h["pipelines"]["lens"]["processed"] >= 1, what="a decision")
        result = httpx.get(f"{proc.url}/pipelines/lens/latest").json()["latest"]["result"]
        assert result["prior_weight"] == 1.0 and result["variant"] == "top1-flip"
        ranked = prior.adjust(np.asarray(result["scores"]), result["candidates"])
        assert result["chosen_index"] == result["candidates"][int(np.argmax(ranked))]
    finally:
        assert proc.stop() in (0, -15), proc.log.read_text()[-2000:]
    # refused before the daemon starts: no lens pipeline, another grid
    with pytest.raises(InputError, match="needs a lens pipeline"):
        serve("sim", "classify", state_dir=tmp_path / "s2", lens_prior=path)
    SettingPrior(np.full(9, 0.5), 1.0, settings[:9]).save(tmp_path / "small.json")
    with pytest.raises(InputError, match="calibrated on a 9-setting grid"):
        serve("sim", "lens", state_dir=tmp_path / "s3", lens_prior=tmp_path / "small.json")
