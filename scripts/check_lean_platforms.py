"""Does the lean device install resolve to binary wheels on the devices edgekit names?

Resolves edgekit's base requirements (pyproject.toml ``dependencies``; add extras with
``--extra``) with ``pip install --dry-run --only-binary=:all:`` for each target platform, without
the hardware and without downloading the wheels, and prints one row per platform: how many
distributions and the onnxruntime and numpy versions picked. Exit
1 when any platform fails to resolve; exit 3 when the package index cannot be reached.

    python scripts/check_lean_platforms.py                    # Pi 5 / Jetson (aarch64), x86-64
    python scripts/check_lean_platforms.py --extra sim --json out/lean-platforms.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the copy pip vendors
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# name -> (pip --platform tags, newest first; the Python version). Raspberry Pi OS bookworm has
# glibc 2.36 and Python 3.11; JetPack 6 (Ubuntu 22.04) glibc 2.35 and Python 3.10.
PLATFORMS: dict[str, tuple[list[str], str]] = {
    "raspberry-pi-5 (aarch64, py3.11)": (
        ["manylinux_2_36_aarch64", "manylinux_2_28_aarch64", "manylinux2014_aarch64"],
        "3.11",
    ),
    "jetson-orin (aarch64, py3.10)": (
        ["manylinux_2_35_aarch64", "manylinux_2_28_aarch64", "manylinux2014_aarch64"],
        "3.10",
    ),
    "x86-64 (py3.11)": (
        ["manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64"],
        "3.11",
    ),
}
OFFLINE = ("Could not fetch", "NewConnectionError", "Errno -3", "Network is unreachable")


def requirements(extras: list[str]) -> list[str]:
    """The base requirement strings of pyproject.toml plus those of ``extras``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


def resolve(reqs: list[str], tags: list[str], python: str) -> dict:
    """pip's resolution report for ``reqs`` on the platform ``tags`` (binary wheels only)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed"]
        cmd += ["--disable-pip-version-check", "--only-binary=:all:", "--implementation", "cp"]
        cmd += ["--python-version", python, "--target", str(Path(tmp) / "t")]
        for tag in tags:
            cmd += ["--platform", tag]
        cmd += ["--report", str(report), *reqs]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return {"ok": False, "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
        installs = json.loads(report.read_text())["install"]
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}
    return {
        "ok": True,
        "distributions": len(installs),
        "onnxruntime": versions.get("onnxruntime"),
        "numpy": versions.get("numpy"),
        "versions": versions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", default=[], help="add an extra (repeat)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    reqs = requirements(args.extra)
    rows = {name: resolve(reqs, tags, py) for name, (tags, py) in PLATFORMS.items()}
    print(f"{'platform':34} {'resolves':8} {'dists':>5} {'onnxruntime':>11} {'numpy':>7}")
    for name, row in rows.items():
        if row["ok"]:
            print(
                f"{name:34} {'yes':8} {row['distributions']:>5} {row['onnxruntime']:>11} "
                f"{row['numpy']:>7}"
            )
        else:
            print(f"{name:34} {'NO':8} {' '.join(row['error'])}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"requirements": reqs, "platforms": rows}, indent=1))
    failed = [row for row in rows.values() if not row["ok"]]
    if failed and all(any(m in " ".join(r["error"]) for m in OFFLINE) for r in failed):
        return 3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
