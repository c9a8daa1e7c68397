"""Packaging and import hygiene: the folder -> package mapping is complete; imports stay light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "toolkit": "edgekit",
    "exporters": "edgekit.exporters",
    "runtimes": "edgekit.runtimes",
    "devices": "edgekit.devices",
    "models": "edgekit.models",
}


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    assert config["package-dir"] == {v: k for k, v in FOLDERS.items()}
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *rel)))
    assert found == listed, f"add to pyproject [tool.setuptools] packages: {sorted(found - listed)}"


def test_import_edgekit_and_cli_help_load_no_heavy_modules() -> None:
    code = (
        "import sys, edgekit, edgekit.cli.app, edgekit.runtimes, edgekit.exporters, edgekit.registry;"
        "heavy = [m for m in ('torch', 'onnxruntime', 'openvino', 'transformers', 'tensorrt') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
