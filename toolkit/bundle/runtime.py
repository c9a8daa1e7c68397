"""How a bundle's graph meets a runtime: the load options its manifest may contribute, the
default device, and the check that a loaded graph's I/O is what the manifest states."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from edgekit.bundle.policy import MANIFEST, check_ort_session_config
from edgekit.errors import BundleError
from edgekit.tensorspec import TensorSpec

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.bundle.format import GraphEntry


def runtime_options(
    entry: GraphEntry, runtime: str, threads: int | None, extra: Mapping[str, Any] | None = None
) -> Any:
    """RuntimeOptions for loading ``entry`` on ``runtime``: the artifact's own load-time settings
    (e.g. ``details["ort_session_config"]`` that keeps a disabled fusion disabled; a bf16 graph's
    bf16 inference precision on OpenVINO) plus ``extra``."""
    from edgekit.runtimes import RuntimeOptions

    merged: dict[str, Any] = dict(extra or {})
    if runtime == "openvino" and entry.precision == "bf16":
        merged["config"] = {"INFERENCE_PRECISION_HINT": "bf16", **dict(merged.get("config") or {})}
    if runtime == "onnxruntime" and entry.details.get("ort_session_config"):
        where = f"graph '{entry.name}'"
        merged["session_config"] = {
            **check_ort_session_config(entry.details["ort_session_config"], where),
            **dict(merged.get("session_config") or {}),
        }
    return RuntimeOptions(threads, merged)


def default_device(runtime: Any) -> str:
    """ "cpu" when the runtime offers it, else its first device; DeviceUnavailableError if none."""
    from edgekit.errors import DeviceUnavailableError

    devices = runtime.devices()
    if not devices:
        raise DeviceUnavailableError(
            f"runtime '{runtime.name}' has no usable device on this machine"
        )
    return "cpu" if "cpu" in devices else devices[0]


def check_io_matches(
    entry: GraphEntry, inputs: list[TensorSpec], outputs: list[TensorSpec]
) -> None:
    """Raise BundleError when a loaded graph's I/O differs from the manifest's statement."""
    for kind, stated, actual in (
        ("input", entry.inputs, inputs),
        ("output", entry.outputs, outputs),
    ):
        by_name = {s.name: s for s in actual}
        stated_names = [s.name for s in stated]
        if sorted(by_name) != sorted(stated_names):
            raise BundleError(
                f"graph '{entry.name}' {kind}s are {sorted(by_name)} but {MANIFEST} states "
                f"{sorted(stated_names)}"
            )
        for spec in stated:
            got = by_name[spec.name]
            fixed_mismatch = len(got.shape) != len(spec.shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b
                for a, b in zip(got.shape, spec.shape, strict=False)
            )
            if got.dtype != spec.dtype or fixed_mismatch:
                raise BundleError(
                    f"graph '{entry.name}' {kind} '{spec.name}' is {got.describe()} but "
                    f"{MANIFEST} states {spec.describe()}"
                )
