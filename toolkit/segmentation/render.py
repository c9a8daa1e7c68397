"""Draw segmentation masks over frames so a person can look: PNGs, a contact sheet, an MP4.

Each object id gets a fixed colour: a translucent fill, a solid one-to-two-pixel contour and,
optionally, a label ("1" or "1 0.93" with a score) near the object's top-left corner. Files are
written atomically (a reader never sees half a PNG). MP4 needs PyAV (the ``video`` extra); when
it is missing ``render_clip`` writes the PNGs and the contact sheet and says so in its result.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.cache import atomic_open, atomic_write_bytes
from edgekit.errors import InputError, MissingDependencyError

PALETTE = (
    (230, 25, 75),
    (60, 180, 75),
    (255, 225, 25),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
)


def colour(object_id: int) -> tuple[int, int, int]:
    """The RGB colour of an object id (ids cycle through a 10-colour palette)."""
    return PALETTE[(int(object_id) - 1) % len(PALETTE)]


def _check_frame(frame: np.ndarray) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise InputError(f"expected a frame (H, W, 3) uint8, got {frame.shape} {frame.dtype}")
    return frame


def _contour(mask: np.ndarray) -> np.ndarray:
    """Pixels of ``mask`` with a 4-neighbour outside it (the image edge counts as outside)."""
    padded = np.pad(mask, 1, constant_values=False)
    inner = padded[1:-1, 1:-1] & padded[:-2, 1:-1] & padded[2:, 1:-1]
    inner &= padded[1:-1, :-2] & padded[1:-1, 2:]
    return mask & ~inner


def overlay(
    frame: np.ndarray,
    masks: np.ndarray,
    object_ids: Sequence[int],
    scores: Sequence[float] | None = None,
    labels: bool = True,
    alpha: float = 0.45,
) -> np.ndarray:
    """``frame`` (H, W, 3) uint8 with ``masks`` (K, H, W) bool drawn over it -> (H, W, 3) uint8.

    ``object_ids`` (K ints) pick colours and label text; ``scores`` (K floats) join the labels.
    """
    frame = _check_frame(frame)
    masks = np.asarray(masks, dtype=bool)
    if masks.ndim != 3 or masks.shape[1:] != frame.shape[:2] or len(object_ids) != len(masks):
        raise InputError(
            f"expected masks (K, {frame.shape[0]}, {frame.shape[1]}) with K = {len(object_ids)} "
            f"object ids, got masks {masks.shape}"
        )
    if scores is not None and len(scores) != len(masks):
        raise InputError(f"got {len(scores)} scores for {len(masks)} masks")
    out = frame.astype(np.float32)
    for mask, oid in zip(masks, object_ids, strict=True):
        tint = np.array(colour(oid), np.float32)
        out[mask] = (1 - alpha) * out[mask] + alpha * tint
        edge = _contour(mask)
        edge[:, 1:] |= edge[:, :-1]  # thicken to two pixels
        out[edge] = tint
    image = np.clip(out + 0.5, 0, 255).astype(np.uint8)
    if labels and masks.any():
        image = _draw_labels(image, masks, object_ids, scores)
    return image


def _draw_labels(image, masks, object_ids, scores) -> np.ndarray:
    from PIL import Image, ImageDraw

    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    for k, (mask, oid) in enumerate(zip(masks, object_ids, strict=True)):
        if not mask.any():
            continue
        rows, cols = np.nonzero(mask)
        text = str(oid) if scores is None else f"{oid} {float(scores[k]):.2f}"
        x, y = int(cols.min()), max(0, int(rows.min()) - 11)
        box = draw.textbbox((x, y), text)
        draw.rectangle(box, fill=(0, 0, 0))
        draw.text((x, y), text, fill=colour(oid))
    return np.asarray(canvas)


def encode_png(image: np.ndarray) -> bytes:
    """PNG bytes of an (H, W, 3) uint8 image."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(_check_frame(image)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_png(path: str | Path, image: np.ndarray) -> Path:
    """Write an (H, W, 3) uint8 image as PNG, atomically."""
    return atomic_write_bytes(path, encode_png(image))


def contact_sheet(images: Sequence[np.ndarray], columns: int = 6, gap: int = 2) -> np.ndarray:
    """Tile same-size (H, W, 3) uint8 images row by row on a dark grid -> one uint8 image."""
    if not images:
        raise InputError("a contact sheet needs at least one image")
    first = _check_frame(images[0])
    h, w = first.shape[:2]
    columns = max(1, min(columns, len(images)))
    rows = -(-len(images) // columns)
    sheet = np.full((rows * (h + gap) + gap, columns * (w + gap) + gap, 3), 24, np.uint8)
    for i, image in enumerate(images):
        if _check_frame(image).shape != first.shape:
            raise InputError(f"image {i} has shape {image.shape}, expected {first.shape}")
        r, c = divmod(i, columns)
        y, x = gap + r * (h + gap), gap + c * (w + gap)
        sheet[y : y + h, x : x + w] = image
    return sheet


def write_mp4(path: str | Path, frames: Sequence[np.ndarray], fps: int = 10) -> Path:
    """Encode (H, W, 3) uint8 frames as H.264 (MPEG-4 Part 2 when x264 is absent), atomically.

    Odd sizes are padded by one pixel (4:2:0 needs even sizes). Raises MissingDependencyError
    without PyAV.
    """
    try:
        import av
    except ImportError as exc:
        raise MissingDependencyError("MP4 output", "av", extra="video") from exc
    if not frames:
        raise InputError("an MP4 needs at least one frame")
    h, w = _check_frame(frames[0]).shape[:2]
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    with atomic_open(path, "wb") as handle:
        container = av.open(handle, mode="w", format="mp4")
        stream = container.add_stream(codec, rate=int(fps))
        stream.width, stream.height = w + w % 2, h + h % 2
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            frame = np.pad(_check_frame(frame), ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        container.close()
    return Path(path)


@dataclass
class RenderResult:
    """What ``render_clip`` wrote: one PNG per frame, the contact sheet, the MP4 (or None)."""

    frames: list[Path]
    sheet: Path
    video: Path | None
    notes: list[str] = field(default_factory=list)


def render_clip(
    frames: np.ndarray,
    masks: np.ndarray,
    object_ids: Sequence[int],
    out_dir: str | Path,
    *,
    scores: np.ndarray | None = None,
    labels: bool = True,
    fps: int = 10,
    video: bool = True,
    sheet_columns: int = 6,
    sheet_every: int = 1,
) -> RenderResult:
    """Render a clip into ``out_dir``: frame_0000.png ..., sheet.png and (with PyAV) clip.mp4.

    frames (T, H, W, 3) uint8; masks (T, K, H, W) bool; scores (T, K) or None. The sheet shows
    every ``sheet_every``-th frame.
    """
    frames, masks = np.asarray(frames), np.asarray(masks, dtype=bool)
    if frames.ndim != 4 or masks.ndim != 4 or masks.shape[0] != frames.shape[0]:
        raise InputError(
            f"expected frames (T, H, W, 3) and masks (T, K, H, W), got {frames.shape} and {masks.shape}"
        )
    out = Path(out_dir)
    drawn = [
        overlay(frame, masks[t], object_ids, None if scores is None else scores[t], labels)
        for t, frame in enumerate(frames)
    ]
    paths = [write_png(out / f"frame_{t:04d}.png", image) for t, image in enumerate(drawn)]
    sheet = write_png(
        out / "sheet.png", contact_sheet(drawn[:: max(1, sheet_every)], sheet_columns)
    )
    result = RenderResult(paths, sheet, None)
    if video:
        try:
            result.video = write_mp4(out / "clip.mp4", drawn, fps)
        except MissingDependencyError as exc:
            result.notes.append(f"{exc} Wrote PNGs only.")
    return result
