"""The daemon's live web page: the current frame (with what the pipelines found drawn on it)
and the latest results, refreshed in place; a box to try the text scorers."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

MIN_WIDTH = 384


def render_frame(frame: Any, results: dict[str, dict[str, Any]]) -> bytes:
    """PNG of ``frame.image`` (H, W, 3) uint8, enlarged to at least MIN_WIDTH pixels wide,
    with segmentation masks (results carrying ``masks``: {obj_id: (H, W) bool}) tinted in and
    one caption line per pipeline result."""
    from PIL import Image, ImageDraw

    image = np.asarray(frame.image)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    image = image[..., :3].astype(np.uint8)
    scale = max(1, -(-MIN_WIDTH // image.shape[1]))
    for res in results.values():
        masks = res.get("_masks")
        if masks:
            image = tint_masks(image, masks)
    big = np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)
    lines = [caption(name, res) for name, res in sorted(results.items())]
    pad = 14 * len(lines) + 6 if lines else 0
    canvas = Image.new("RGB", (big.shape[1], big.shape[0] + pad), (16, 16, 16))
    canvas.paste(Image.fromarray(big), (0, 0))
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(lines):
        draw.text((4, big.shape[0] + 3 + 14 * i), line, fill=(235, 235, 235))
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    return buf.getvalue()


PALETTE = np.array(
    [[230, 25, 75], [60, 180, 75], [0, 130, 200], [245, 130, 48], [145, 30, 180], [70, 240, 240]],
    dtype=np.float32,
)


def tint_masks(image: np.ndarray, masks: dict[Any, np.ndarray], alpha: float = 0.45) -> np.ndarray:
    """``image`` (H, W, 3) uint8 with each boolean mask (H, W) blended in its object's colour."""
    out = image.astype(np.float32)
    for i, (_, mask) in enumerate(sorted(masks.items(), key=lambda kv: str(kv[0]))):
        m = np.asarray(mask, dtype=bool)
        if m.shape != image.shape[:2]:
            continue
        out[m] = (1 - alpha) * out[m] + alpha * PALETTE[i % len(PALETTE)]
    return out.clip(0, 255).astype(np.uint8)


def caption(name: str, entry: dict[str, Any]) -> str:
    """One line describing a pipeline's latest result."""
    res = entry.get("result") or {}
    if entry.get("kind") == "lens":
        return (
            f"{name}: {res.get('setting')}  VisiT {res.get('score', 0):.2f}  "
            f"-> {res.get('label')}  ({res.get('captures')} captures)"
        )
    if "label" in res:
        return f"{name}: {res['label']} p={res.get('prob', 0):.2f}  [{res.get('settings', '')}]"
    return f"{name}: " + ", ".join(f"{k}={v}" for k, v in list(res.items())[:4])


PAGE_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgekit daemon</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#111;color:#eee}
.row{display:flex;gap:20px;flex-wrap:wrap}
img{image-rendering:pixelated;border:1px solid #444;max-width:90vw}
pre{background:#1c1c1c;padding:8px;max-width:560px;overflow:auto;font-size:12px}
h1{font-size:18px} .bad{color:#f66} .ok{color:#6f6}
textarea{width:100%;height:60px}
</style></head><body>
<h1>edgekit daemon <span id="status">connecting...</span></h1>
<div class="row">
 <div><img id="frame" alt="current frame"><div id="fps"></div></div>
 <div><h2>Pipelines</h2><div id="pipelines"></div>
  <h2>Text scorer</h2><input id="bundle" placeholder="bundle name, e.g. minilm">
  <textarea id="texts" placeholder="one text per line"></textarea>
  <button id="score">Score</button><pre id="scores"></pre></div>
</div>
<script>
const img = document.getElementById('frame');
let frames = 0, t0 = performance.now();
function nextFrame(){ img.src = '/frame.png?t=' + Date.now(); }
img.onload = () => { frames++; document.getElementById('fps').textContent =
  (frames / ((performance.now() - t0) / 1000)).toFixed(1) + ' page fps';
  img.dataset.loaded = frames; setTimeout(nextFrame, 100); };
img.onerror = () => setTimeout(nextFrame, 500);
nextFrame();
async function poll(){
  try {
    const h = await (await fetch('/health')).json();
    const s = document.getElementById('status');
    s.textContent = h.status + ' - ' + h.frames + ' frames';
    s.className = h.status === 'ok' ? 'ok' : 'bad';
    const box = document.getElementById('pipelines'); box.innerHTML = '';
    for (const name of Object.keys(h.pipelines)) {
      const r = await (await fetch('/pipelines/' + name + '/latest')).json();
      const pre = document.createElement('pre'); pre.className = 'pipeline';
      pre.dataset.name = name;
      pre.textContent = name + ' ' + JSON.stringify(r.status) + '\\n' +
        JSON.stringify(r.latest ? r.latest.result : null, null, 1);
      box.appendChild(pre);
    }
  } catch (e) { document.getElementById('status').textContent = 'offline'; }
  setTimeout(poll, 1000);
}
poll();
document.getElementById('score').onclick = async () => {
  const texts = document.getElementById('texts').value.split('\\n').filter(t => t.trim());
  const r = await fetch('/score', {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({bundle: document.getElementById('bundle').value, texts})});
  document.getElementById('scores').textContent = JSON.stringify(await r.json(), null, 1);
};
</script></body></html>
"""
