"""Imports run one way: models -> exporters -> runtimes / devices -> bundle -> build / bench ->
applications (Lens, segmentation, text scorers, model studies) -> daemon / cluster -> CLI.

Runtimes load artifact files and know nothing of bundles; a bundle opens its graphs' sessions
through them, so the bundle sits above the runtimes.

Every ``edgekit`` import in the code, module level or inside a function, is checked against the
layer order: a module may import its own layer and the layers below it, never one above. The
shared core (errors, cache, cards, registry, progress, ...) sits below everything, then the
contracts (CONTRACTS); there are no exceptions.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# folder -> package, as pyproject maps them ("toolkit" holds edgekit itself)
FOLDERS = {
    folder: package
    for package, folder in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["package-dir"].items()
}
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("contracts",),
    ("models",),
    ("exporters",),
    ("runtimes", "devices"),
    ("bundle",),
    ("build", "bench"),
    ("lens", "segmentation", "text_scorer", "studies"),
    ("daemon", "cluster"),
    ("cli",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
# Contracts: pure modules a package publishes for the layers below it to build, evaluate or
# choose by. Each imports only the core and other contracts (the test below holds them to it:
# no runtime, bundle or device). The SAM 2 graph contract, streaming predictor (and its
# per-object search regions), its config,
# its motion model, prompts, array maths, metrics, rollout parity, box tracking metrics, the real clips (and the
# recorded sample videos they read) and mask
# rendering (a streaming card's task metric is a rollout of that predictor over its graphs); the tensor- and decision-parity metrics bundles
# self-test and cards evaluate with; the bundle policy keys exporters write; the machine facts
# (CPU flags) exporters pick int8 recipes by; the simulated world's photos the sim camera
# renders and the photo classifiers train on.
CONTRACTS = {
    *(
        f"edgekit.segmentation.{name}"
        for name in (
            "graphs",
            "arrays",
            "config",
            "motion",
            "prompts",
            "stream",
            "region",
            "metrics",
            "rollout",
            "tracking",
            "realclips",
            "sample_videos",
            "render",
        )  # fmt: skip
    ),
    "edgekit.build.parity",
    "edgekit.build.decision_parity",
    "edgekit.bundle.policy",
    "edgekit.bench.environment",
    "edgekit.devices.scenes",
}


def package_of(module: str) -> str:
    """The layer name of ``edgekit.x.y``: its first component below edgekit, or "core";
    "contracts" for CONTRACTS; "studies" for a model's study, ``edgekit.models.NAME.experiment``
    (ranked with the applications)."""
    if module in CONTRACTS:
        return "contracts"
    parts = module.split(".")
    if len(parts) == 4 and parts[1] == "models" and parts[3] == "experiment":
        return "studies"
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "core"


@cache
def modules() -> dict[str, Path]:
    found = {}
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p not in ("__init__", "__main__")]
            found[".".join([prefix, *parts])] = path
    return found


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "edgekit" or node.module.startswith("edgekit."):
                for alias in node.names:  # a submodule where one is named, else the module
                    sub = f"{node.module}.{alias.name}"
                    out.add(sub if sub in modules() else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("edgekit.")}
    return out


def reverse_imports() -> set[str]:
    found = set()
    for module, path in modules().items():
        here = package_of(module)
        for target in imports(path):
            there = package_of(target)
            if RANK[there] > RANK[here]:
                found.add(f"{module} -> {target}")
    return found


def test_every_module_sits_in_a_layer() -> None:
    top = {m.split(".")[1] for m in modules() if m.count(".") >= 1}
    folders = {p.name for p in (ROOT / "toolkit").iterdir() if (p / "__init__.py").is_file()}
    assert folders <= set(RANK), f"a toolkit package has no layer: {folders - set(RANK)}"
    assert {"bundle", "build", "bench", "lens", "segmentation", "daemon", "cli"} <= top


def test_imports_run_one_way() -> None:
    found = sorted(reverse_imports())
    assert not found, "imports against the layer order (models -> ... -> cli):\n" + "\n".join(found)


def test_the_check_sees_a_reverse_import(tmp_path, monkeypatch) -> None:
    """A runtime importing the daemon is caught (the check can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from edgekit.daemon.app import create_app\n")
    monkeypatch.setitem(modules(), "edgekit.runtimes.bad", bad)
    assert "edgekit.runtimes.bad -> edgekit.daemon.app" in reverse_imports()


def test_a_contract_module_may_not_reach_a_runtime(tmp_path, monkeypatch) -> None:
    """The streaming predictor importing a runtime is caught: models build against it."""
    bad = tmp_path / "bad.py"
    bad.write_text("from edgekit.runtimes.onnxruntime import OnnxRuntime\n")
    monkeypatch.setitem(modules(), "edgekit.segmentation.stream", bad)
    assert "edgekit.segmentation.stream -> edgekit.runtimes.onnxruntime" in reverse_imports()
