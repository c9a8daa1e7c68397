"""Procedural editing scenes: small RGB images of coloured shapes, instructions and true edits.

A scene is a background colour plus two shapes (square, disc, plus) of distinct object colours,
each placed near the centre of its own quadrant (jittered by up to one pixel). Four edit tasks:

- "recolour": repaint the object of colour A with colour B;
- "add": draw a shape of colour B at the centre of an empty quadrant;
- "remove": paint the object of colour A with the background colour;
- "background": repaint every background pixel with a new background colour.

An instruction is a fixed-layout vector (``INSTRUCTION_DIM``): task one-hot | colour A | colour B
| background | shape | quadrant, each one-hot (unused groups are zero). ``apply_edit`` computes
the true edit; the specialists (``specialists.py``) produce noisy ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError

TASKS = ("recolour", "add", "remove", "background")
OBJECT_COLOURS = {
    "red": (0.9, 0.1, 0.1),
    "green": (0.1, 0.8, 0.2),
    "blue": (0.15, 0.25, 0.95),
    "yellow": (0.95, 0.9, 0.1),
    "magenta": (0.85, 0.15, 0.85),
    "cyan": (0.1, 0.85, 0.9),
}
BACKGROUNDS = {
    "black": (0.05, 0.05, 0.05),
    "grey": (0.5, 0.5, 0.5),
    "white": (0.95, 0.95, 0.95),
    "brown": (0.45, 0.3, 0.15),
}
SHAPES = ("square", "disc", "plus")
QUADRANTS = ("top-left", "top-right", "bottom-left", "bottom-right")
OBJ_NAMES = tuple(OBJECT_COLOURS)
BG_NAMES = tuple(BACKGROUNDS)
#: every colour a correct edit can contain, (K, 3): the objects' then the backgrounds'
PALETTE = np.array([*OBJECT_COLOURS.values(), *BACKGROUNDS.values()], dtype=np.float32)
GROUPS = {
    "task": len(TASKS),
    "colour_a": len(OBJ_NAMES),
    "colour_b": len(OBJ_NAMES),
    "background": len(BG_NAMES),
    "shape": len(SHAPES),
    "quadrant": len(QUADRANTS),
}
INSTRUCTION_DIM = sum(GROUPS.values())
SHAPE_SIZE = 5  # every shape fits a 5 x 5 box


@dataclass(frozen=True)
class Shape:
    """One object: its kind, object-colour name, quadrant index and top-left corner (row, col)."""

    kind: str
    colour: str
    quadrant: int
    top: int
    left: int


@dataclass(frozen=True)
class Scene:
    """A background colour name and its objects, on a ``size`` x ``size`` canvas."""

    background: str
    shapes: tuple[Shape, ...]
    size: int


@dataclass(frozen=True)
class Instruction:
    """One edit request; fields a task does not use are None."""

    task: str
    colour_a: str | None = None
    colour_b: str | None = None
    background: str | None = None
    shape: str | None = None
    quadrant: int | None = None

    def text(self) -> str:
        """The request in words, e.g. "recolour the red object blue"."""
        if self.task == "recolour":
            return f"recolour the {self.colour_a} object {self.colour_b}"
        if self.task == "add":
            assert self.quadrant is not None
            return f"add a {self.colour_b} {self.shape} {QUADRANTS[self.quadrant]}"
        if self.task == "remove":
            return f"remove the {self.colour_a} object"
        return f"make the background {self.background}"

    def vector(self) -> np.ndarray:
        """(INSTRUCTION_DIM,) float32, the one-hot groups of ``GROUPS`` concatenated."""
        out = np.zeros(INSTRUCTION_DIM, np.float32)
        values = {
            "task": TASKS.index(self.task),
            "colour_a": None if self.colour_a is None else OBJ_NAMES.index(self.colour_a),
            "colour_b": None if self.colour_b is None else OBJ_NAMES.index(self.colour_b),
            "background": None if self.background is None else BG_NAMES.index(self.background),
            "shape": None if self.shape is None else SHAPES.index(self.shape),
            "quadrant": self.quadrant,
        }
        offset = 0
        for group, width in GROUPS.items():
            if values[group] is not None:
                out[offset + values[group]] = 1.0
            offset += width
        return out


def shape_mask(kind: str, size: int, top: int, left: int) -> np.ndarray:
    """(size, size) bool mask of a ``kind`` shape whose 5 x 5 box starts at (top, left)."""
    if kind not in SHAPES:
        raise InputError(f"shape must be one of {SHAPES}, got {kind!r}")
    r, c = np.mgrid[0:SHAPE_SIZE, 0:SHAPE_SIZE] - (SHAPE_SIZE - 1) / 2
    if kind == "square":
        box = np.ones((SHAPE_SIZE, SHAPE_SIZE), bool)
    elif kind == "disc":
        box = r * r + c * c <= 5.0
    else:
        box = (np.abs(r) < 0.5) | (np.abs(c) < 0.5)
    mask = np.zeros((size, size), bool)
    mask[top : top + SHAPE_SIZE, left : left + SHAPE_SIZE] = box
    return mask


def quadrant_corner(quadrant: int, size: int, jitter: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """Top-left corner of a shape box centred in ``quadrant`` of a ``size`` canvas (+ jitter)."""
    half = size // 2
    offset = (half - SHAPE_SIZE) // 2
    row = (quadrant // 2) * half + offset + jitter[0]
    col = (quadrant % 2) * half + offset + jitter[1]
    return row, col


def object_mask(scene: Scene, shape: Shape) -> np.ndarray:
    return shape_mask(shape.kind, scene.size, shape.top, shape.left)


def render(scene: Scene) -> np.ndarray:
    """(3, size, size) float32 image in [0, 1]."""
    image = np.empty((3, scene.size, scene.size), np.float32)
    image[:] = np.asarray(BACKGROUNDS[scene.background], np.float32)[:, None, None]
    for shape in scene.shapes:
        image[:, object_mask(scene, shape)] = np.asarray(OBJECT_COLOURS[shape.colour])[:, None]
    return image


def random_scene(rng: np.random.Generator, size: int = 16) -> Scene:
    """A background and two shapes of distinct colours in two distinct quadrants."""
    if size < 12 or size % 2:
        raise InputError(f"scene size must be an even number >= 12, got {size}")
    quadrants = rng.choice(4, 2, replace=False)
    colours = rng.choice(len(OBJ_NAMES), 2, replace=False)
    slack = (size // 2 - SHAPE_SIZE) // 2
    shapes = []
    for q, c in zip(quadrants, colours, strict=True):
        jitter = tuple(int(v) for v in rng.integers(-min(1, slack), min(1, slack) + 1, 2))
        top, left = quadrant_corner(int(q), size, jitter)  # type: ignore[arg-type]
        shapes.append(Shape(SHAPES[rng.integers(3)], OBJ_NAMES[c], int(q), top, left))
    return Scene(BG_NAMES[rng.integers(len(BG_NAMES))], tuple(shapes), size)


def random_instruction(scene: Scene, task: str, rng: np.random.Generator) -> Instruction:
    """A valid ``task`` request for ``scene`` (new colours are never already in the scene)."""
    if task not in TASKS:
        raise InputError(f"task must be one of {TASKS}, got {task!r}")
    present = {s.colour for s in scene.shapes}
    free = [c for c in OBJ_NAMES if c not in present]
    target = scene.shapes[rng.integers(len(scene.shapes))]
    if task == "recolour":
        return Instruction(task, colour_a=target.colour, colour_b=free[rng.integers(len(free))])
    if task == "remove":
        return Instruction(task, colour_a=target.colour)
    if task == "add":
        empty = [q for q in range(4) if q not in {s.quadrant for s in scene.shapes}]
        return Instruction(
            task,
            colour_b=free[rng.integers(len(free))],
            shape=SHAPES[rng.integers(3)],
            quadrant=empty[rng.integers(len(empty))],
        )
    others = [b for b in BG_NAMES if b != scene.background]
    return Instruction(task, background=others[rng.integers(len(others))])


def find_shape(scene: Scene, colour: str | None) -> Shape:
    for shape in scene.shapes:
        if shape.colour == colour:
            return shape
    raise InputError(f"the scene has no {colour} object; it has {[s.colour for s in scene.shapes]}")


def apply_edit(scene: Scene, instruction: Instruction) -> Scene:
    """The scene after the true edit."""
    if instruction.task == "recolour":
        old = find_shape(scene, instruction.colour_a)
        new = Shape(old.kind, str(instruction.colour_b), old.quadrant, old.top, old.left)
        return Scene(
            scene.background, tuple(new if s == old else s for s in scene.shapes), scene.size
        )
    if instruction.task == "remove":
        old = find_shape(scene, instruction.colour_a)
        return Scene(scene.background, tuple(s for s in scene.shapes if s != old), scene.size)
    if instruction.task == "add":
        assert instruction.quadrant is not None and instruction.shape is not None
        if instruction.quadrant in {s.quadrant for s in scene.shapes}:
            raise InputError(f"quadrant {QUADRANTS[instruction.quadrant]} is not empty")
        top, left = quadrant_corner(instruction.quadrant, scene.size)
        added = Shape(instruction.shape, str(instruction.colour_b), instruction.quadrant, top, left)
        return Scene(scene.background, (*scene.shapes, added), scene.size)
    return Scene(str(instruction.background), scene.shapes, scene.size)


@dataclass
class EditSet:
    """Aligned arrays of N edits: source / target (N, 3, S, S) float32 in [0, 1], instruction
    (N, INSTRUCTION_DIM) float32, task (N,) int64 index into TASKS; ``scenes`` and
    ``instructions`` keep the structured forms (for specialists, the judge and plot titles)."""

    source: np.ndarray
    target: np.ndarray
    instruction: np.ndarray
    task: np.ndarray
    scenes: list[Scene]
    instructions: list[Instruction]

    def __len__(self) -> int:
        return len(self.source)

    def take(self, index: np.ndarray) -> EditSet:
        return EditSet(
            self.source[index],
            self.target[index],
            self.instruction[index],
            self.task[index],
            [self.scenes[i] for i in index],
            [self.instructions[i] for i in index],
        )


def make_edits(count: int, seed: int, size: int = 16) -> EditSet:
    """``count`` scenes with a request each (tasks in turn) and their true edits."""
    if count < 1:
        raise InputError(f"count must be >= 1, got {count}")
    rng = np.random.default_rng(seed)
    scenes, instructions, sources, targets = [], [], [], []
    for i in range(count):
        scene = random_scene(rng, size)
        instruction = random_instruction(scene, TASKS[i % len(TASKS)], rng)
        scenes.append(scene)
        instructions.append(instruction)
        sources.append(render(scene))
        targets.append(render(apply_edit(scene, instruction)))
    return EditSet(
        np.stack(sources),
        np.stack(targets),
        np.stack([ins.vector() for ins in instructions]),
        np.array([TASKS.index(ins.task) for ins in instructions], np.int64),
        scenes,
        instructions,
    )
