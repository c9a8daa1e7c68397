"""The capture sets of the Lens benchmark (edgekit.lens.bench), made by the sensor simulator.

A scene set names the capture set-up: "es-diverse" (a print on a dark backdrop in a dark room
lit by two ceiling lamps, faithful to ImageNet-ES Diverse) or "wide-range" (the scene fills the
frame, 10 to 100,000 lux). ``capture_set`` captures every scene in every environment of a set
at the paper's 27 settings plus the camera's auto-exposure shots of each metering mode, as the
classifier sees them; deterministic under the seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit.lens.controller import classifier_view, paper_grid

SCENE_SETS = ("es-diverse", "wide-range")
DEFAULT_SCENE_SET = "es-diverse"
ES_DIVERSE_APERTURE = (5.0, 22.0)  # the widest f-number of the paper's grid is the lens's limit
# "ae" = the first: evaluative, the default metering of a DSLR such as ImageNet-ES's Canon;
# the others are "ae <mode>"
AE_METERING = ("evaluative", "average", "center-weighted")


def lighting_names(scene_set: str = DEFAULT_SCENE_SET) -> list[str]:
    """Names of the lighting environments of ``scene_set`` (devices/lighting.py)."""
    from edgekit.devices.lighting import lighting_set

    return list(lighting_set(scene_set))


def resolve_scene_set(scene_set: str | None, environments: tuple[str, ...] | None) -> str:
    """The scene set to run: ``scene_set`` if given (its environments must include every name
    in ``environments``), else the set holding all ``environments``, else DEFAULT_SCENE_SET."""
    from edgekit.devices.lighting import LIGHTING_SETS, get_lighting
    from edgekit.errors import InputError

    for env in environments or ():
        get_lighting(env)  # unknown names: InputError listing the known ones
    if scene_set is None:
        if not environments:
            return DEFAULT_SCENE_SET
        holders = [n for n in SCENE_SETS if set(environments) <= set(LIGHTING_SETS[n])]
        if not holders:
            raise InputError(
                f"environments {', '.join(environments)} mix lighting sets; use the names of one "
                f"set: {'; '.join(f'{n}: ' + ', '.join(LIGHTING_SETS[n]) for n in SCENE_SETS)}"
            )
        return holders[0]
    if scene_set not in SCENE_SETS:
        raise InputError(
            f"unknown scene set '{scene_set}'; expected one of {', '.join(SCENE_SETS)}"
        )
    missing = [e for e in environments or () if e not in LIGHTING_SETS[scene_set]]
    if missing:
        raise InputError(
            f"environments {', '.join(missing)} are not in the '{scene_set}' set; expected "
            f"names from {', '.join(LIGHTING_SETS[scene_set])}"
        )
    return scene_set


def bench_camera(scene: np.ndarray, env: str, seed: int, scene_set: str, metering: str) -> Any:
    """The SimCamera of ``scene_set`` looking at ``scene`` (H, W, 3) under ``env``: "es-diverse"
    frames are (2H, 2W) with the scene as a print in the middle; "wide-range" frames are (H, W)."""
    from edgekit.devices.print_mount import PrintMount
    from edgekit.devices.sim_camera import APERTURE_RANGE, SimCamera

    h, w = scene.shape[:2]
    if scene_set == "es-diverse":
        return SimCamera(
            scene=scene, lighting=env, seed=seed, size=(2 * h, 2 * w), mount=PrintMount(),
            metering=metering, aperture_range=ES_DIVERSE_APERTURE,
        )  # fmt: skip
    return SimCamera(
        scene=scene, lighting=env, seed=seed, size=(h, w), metering=metering,
        aperture_range=APERTURE_RANGE,
    )  # fmt: skip


def check_bench_counts(
    test_per_class: int, calib_per_class: int, ae_metering: tuple[str, ...]
) -> None:
    """Refuse a Lens benchmark with no test or calibration scenes or no metering mode
    (InputError naming the value and what is expected)."""
    from edgekit.errors import InputError

    for name, value in (("test_per_class", test_per_class), ("calib_per_class", calib_per_class)):
        if int(value) < 1:
            flag = name.replace("_", "-")
            raise InputError(f"--{flag} is {value}; it needs at least 1 scene per class and seed")
    if not ae_metering:
        raise InputError("ae_metering needs at least one metering mode, e.g. ('average',)")


def scene_crops(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Held-out-band crops (10 * per_class, 64, 64, 3) float32 in [0, 1] and labels (N,) int."""
    import torch

    from edgekit.models.photo_cnn import data

    generator = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for cls, photo in enumerate(data.load_photos()):
        crops = data.sample_crops(photo, per_class, "test", data.TEST_SCALE, generator, False)
        images.append(crops.permute(0, 2, 3, 1).numpy())
        labels.extend([cls] * per_class)
    return np.concatenate(images).astype(np.float32), np.asarray(labels)


def ae_key(metering: str, metering_modes: tuple[str, ...]) -> str:
    """Capture-set key of the auto-exposure shots metered by ``metering``: "ae" for the first
    mode, "ae <mode>" for the others."""
    return "ae" if metering == metering_modes[0] else f"ae {metering}"


def capture_set(
    scenes: np.ndarray,
    environments: list[str],
    seed: int,
    ae_shots: int,
    step: Any = None,
    scene_set: str = DEFAULT_SCENE_SET,
    ae_metering: tuple[str, ...] = AE_METERING,
) -> dict[str, np.ndarray]:
    """Captures of every scene (S, 64, 64, 3) in every environment of ``scene_set``, as the
    classifier sees them (``classifier_view``): "grid" (E, S, 27, 64, 64, 3) uint8,
    "grid_latency" (E, S, 27) s, "grid_mean" (E, S, 27) mean 8-bit level, for each metering
    mode m "ae"/"ae m" (E, S, A, 64, 64, 3) uint8
    and "ae_latency"/"ae m_latency" (E, S, A), "meter_ev" (E, S): the first mode's metered EV100
    (program-mode AE, with metering error)."""
    from edgekit.devices.camera import CaptureSettings

    grid = paper_grid()
    auto = CaptureSettings(auto_exposure=True)
    e, s, h, w = len(environments), len(scenes), scenes.shape[1], scenes.shape[2]
    out = {
        "grid": np.zeros((e, s, len(grid), h, w, 3), np.uint8),
        "grid_latency": np.zeros((e, s, len(grid))),
        "grid_mean": np.zeros((e, s, len(grid))),
        "meter_ev": np.zeros((e, s)),
    }
    for metering in ae_metering:
        key = ae_key(metering, ae_metering)
        out[key] = np.zeros((e, s, ae_shots, h, w, 3), np.uint8)
        out[f"{key}_latency"] = np.zeros((e, s, ae_shots))
    for ei, env in enumerate(environments):
        cameras = {
            m: bench_camera(scenes[0], env, seed * 1000 + ei + 100 * mi, scene_set, m)
            for mi, m in enumerate(ae_metering)
        }
        grid_camera = cameras[ae_metering[0]]
        for si, scene in enumerate(scenes):
            for camera in cameras.values():
                camera.set_scene(scene)
            meter = grid_camera.meter(np.random.default_rng((seed, ei, si, 7)))
            out["meter_ev"][ei, si] = meter.exposure_value()
            for gi, setting in enumerate(grid):
                frame = grid_camera.capture(setting)
                out["grid"][ei, si, gi] = classifier_view(frame)
                out["grid_mean"][ei, si, gi] = out["grid"][ei, si, gi].mean()
                out["grid_latency"][ei, si, gi] = frame.latency_s
            for metering, camera in cameras.items():
                key = ae_key(metering, ae_metering)
                for ai in range(ae_shots):
                    frame = camera.capture(auto)
                    out[key][ei, si, ai] = classifier_view(frame)
                    out[f"{key}_latency"][ei, si, ai] = frame.latency_s
        if step:
            step(f"seed {seed}: captured {env}")
    return out
