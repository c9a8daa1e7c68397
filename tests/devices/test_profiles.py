"""Device profiles: detection from device-tree model strings and the runtime each graph gets."""

from __future__ import annotations

import pytest

from edgekit.devices.profiles import PROFILES, get_profile, pick_runtime, profile_from_model
from edgekit.errors import InputError


@pytest.mark.parametrize(
    ("model", "machine", "nvidia", "expected"),
    [
        ("Raspberry Pi 5 Model B Rev 1.0", "aarch64", False, "raspberry-pi-5"),
        ("NVIDIA Jetson Orin Nano Developer Kit", "aarch64", False, "jetson-orin-nano"),
        (
            "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
            "aarch64",
            False,
            "jetson-orin-nx",
        ),
        ("Jetson AGX Orin", "aarch64", False, "jetson-orin-agx"),
        ("", "x86_64", False, "x86-cpu"),
        ("", "x86_64", True, "cuda-server"),
    ],
)
def test_profile_from_device_tree(model, machine, nvidia, expected):
    assert profile_from_model(model, machine, nvidia).name == expected


def test_every_profile_prefers_a_runtime_that_reads_its_first_target():
    from edgekit.exporters import Target
    from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT

    for profile in PROFILES.values():
        fmt = Target.parse(profile.targets[0]).format
        assert set(profile.runtimes) & set(DEFAULT_RUNTIME_FOR_FORMAT[fmt]), profile.name


def test_pick_runtime_here_and_unknown_profile():
    cpu = get_profile("x86-cpu")
    assert pick_runtime("onnx", cpu) == ("onnxruntime", None)
    assert pick_runtime("openvino", cpu)[0] == "openvino"
    # a Jetson profile on this machine: TensorRT is absent, ONNX Runtime has no CUDA device
    runtime, device = pick_runtime("onnx", get_profile("jetson-orin"))
    assert runtime == "onnxruntime" and device is None
    assert pick_runtime("tensorrt", cpu) == (None, None)
    with pytest.raises(InputError, match="x86-cpu"):
        get_profile("toaster")
