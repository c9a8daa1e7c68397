"""Specialist editors: one procedural editor per task that fails at a controlled rate.

Each specialist returns the true edit with probability ``1 - failure_rate`` and otherwise one of
its task's typical failures (picked uniformly), the kinds of noise the paper sees in
specialist-synthesised pairs:

- recolour: "wrong colour", "partial" (only the object's top rows), "leak" (the dilated box);
- add: "wrong place" (another empty quadrant), "wrong colour", "smear" (blurred shape);
- remove: "no-op", "ghost" (half-transparent remains), "wrong object";
- background: "over-edit" (objects painted too), "partial" (top half only), "noise";

and, for any task, "artifact": the true edit plus Gaussian pixel noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.omniedit.scenes import (
    BACKGROUNDS,
    OBJ_NAMES,
    OBJECT_COLOURS,
    QUADRANTS,
    TASKS,
    EditSet,
    Instruction,
    Scene,
    apply_edit,
    find_shape,
    object_mask,
    render,
    shape_mask,
)

FAILURES: dict[str, tuple[str, ...]] = {
    "recolour": ("wrong colour", "partial", "leak", "artifact"),
    "add": ("wrong place", "wrong colour", "smear", "artifact"),
    "remove": ("no-op", "ghost", "wrong object", "artifact"),
    "background": ("over-edit", "partial", "noise", "artifact"),
}


@dataclass
class SpecialistPairs:
    """Specialist output for an EditSet: ``edited`` (N, 3, S, S) float32 in [0, 1] and
    ``failure`` (N,) the failure kind per pair ("" where the specialist succeeded)."""

    edits: EditSet
    edited: np.ndarray
    failure: list[str]

    @property
    def failed(self) -> np.ndarray:
        """(N,) bool, True where the pair is not the true edit."""
        return np.array([f != "" for f in self.failure])


def _colour(name: str) -> np.ndarray:
    return np.asarray(OBJECT_COLOURS[name], np.float32)[:, None]


def _other_colour(scene: Scene, avoid: set[str], rng: np.random.Generator) -> str:
    options = [c for c in OBJ_NAMES if c not in avoid | {s.colour for s in scene.shapes}]
    return options[rng.integers(len(options))]


def _blur(image: np.ndarray) -> np.ndarray:
    """3 x 3 box blur with edge padding, (3, S, S) -> (3, S, S)."""
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1)), mode="edge")
    size = image.shape[-1]
    return sum(
        padded[:, r : r + size, c : c + size] for r in range(3) for c in range(3)
    ) / np.float32(9)


def failed_edit(
    scene: Scene, instruction: Instruction, kind: str, rng: np.random.Generator
) -> np.ndarray:
    """(3, S, S) float32: the ``kind`` failure of the specialist for ``instruction.task``."""
    task = instruction.task
    if kind not in FAILURES.get(task, ()):
        raise InputError(f"{task!r} specialists fail as one of {FAILURES.get(task)}, not {kind!r}")
    truth = render(apply_edit(scene, instruction))
    if kind == "artifact":
        noise = rng.normal(0.0, 0.12, truth.shape).astype(np.float32)
        return np.clip(truth + noise, 0.0, 1.0)
    source = render(scene)
    if task == "recolour":
        shape = find_shape(scene, instruction.colour_a)
        mask = object_mask(scene, shape)
        out = source.copy()
        if kind == "wrong colour":
            out[:, mask] = _colour(_other_colour(scene, {str(instruction.colour_b)}, rng))
        elif kind == "partial":
            rows = np.arange(scene.size)[:, None] < shape.top + 2
            out[:, mask & rows] = _colour(str(instruction.colour_b))
        else:  # leak: the box around the object, one pixel wider on every side
            box = np.zeros_like(mask)
            box[max(shape.top - 1, 0) : shape.top + 6, max(shape.left - 1, 0) : shape.left + 6] = 1
            out[:, box] = _colour(str(instruction.colour_b))
        return out
    if task == "add":
        assert instruction.quadrant is not None
        if kind == "wrong place":
            taken = {s.quadrant for s in scene.shapes} | {instruction.quadrant}
            elsewhere = [q for q in range(len(QUADRANTS)) if q not in taken]
            moved = Instruction(
                "add",
                colour_b=instruction.colour_b,
                shape=instruction.shape,
                quadrant=elsewhere[rng.integers(len(elsewhere))],
            )
            return render(apply_edit(scene, moved))
        if kind == "wrong colour":
            recoloured = Instruction(
                "add",
                colour_b=_other_colour(scene, {str(instruction.colour_b)}, rng),
                shape=instruction.shape,
                quadrant=instruction.quadrant,
            )
            return render(apply_edit(scene, recoloured))
        smeared = _blur(truth)  # smear: the added shape blurred into its surroundings
        added = apply_edit(scene, instruction).shapes[-1]
        near = shape_mask(added.kind, scene.size, added.top, added.left)
        near = _blur(near[None].astype(np.float32))[0] > 0
        return np.where(near[None], smeared, truth).astype(np.float32)
    if task == "remove":
        shape = find_shape(scene, instruction.colour_a)
        if kind == "no-op":
            return source
        if kind == "ghost":
            mask = object_mask(scene, shape)
            out = truth.copy()
            out[:, mask] = 0.5 * source[:, mask] + 0.5 * truth[:, mask]
            return out
        other = next(s for s in scene.shapes if s != shape)  # wrong object
        return render(apply_edit(scene, Instruction("remove", colour_a=other.colour)))
    bg = np.asarray(BACKGROUNDS[str(instruction.background)], np.float32)[:, None, None]
    if kind == "over-edit":
        return np.broadcast_to(bg, truth.shape).astype(np.float32).copy()
    if kind == "partial":
        out = source.copy()
        out[:, : scene.size // 2] = truth[:, : scene.size // 2]
        return out
    noisy = truth.copy()  # noise: a speckled background repaint
    speckle = rng.random(truth.shape[1:]) < 0.2
    background = np.ones(truth.shape[1:], bool)
    for s in scene.shapes:
        background &= ~object_mask(scene, s)
    noisy[:, speckle & background] = source[:, speckle & background]
    return noisy


def run_specialists(edits: EditSet, failure_rates: dict[str, float], seed: int) -> SpecialistPairs:
    """Each pair edited by its task's specialist, failing with ``failure_rates[task]``."""
    if set(failure_rates) != set(TASKS):
        raise InputError(f"failure_rates must name every task {TASKS}, got {sorted(failure_rates)}")
    if any(not 0.0 <= r <= 1.0 for r in failure_rates.values()):
        raise InputError(f"failure rates must lie in [0, 1], got {failure_rates}")
    rng = np.random.default_rng(seed)
    edited = edits.target.copy()
    failure = [""] * len(edits)
    for i, (scene, instruction) in enumerate(zip(edits.scenes, edits.instructions, strict=True)):
        if rng.random() < failure_rates[instruction.task]:
            kinds = FAILURES[instruction.task]
            failure[i] = kinds[rng.integers(len(kinds))]
            edited[i] = failed_edit(scene, instruction, failure[i], rng)
    return SpecialistPairs(edits, edited, failure)
