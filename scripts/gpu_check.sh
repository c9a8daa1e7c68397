#!/usr/bin/env bash
# The GPU check: bundles built on a CPU machine, verified and timed on a CUDA machine.
#
# Needs edgekit with its `gpu` extra (onnxruntime-gpu; tensorrt where NVIDIA's wheels can be
# installed) on a machine with a CUDA GPU. For every bundle given:
#   1. `edgekit runtimes`: which backends and devices load here;
#   2. `edgekit verify --runtime onnxruntime@cuda`: tensor parity against the torch
#      reference, the task metric measured on the GPU, rollout parity for SAM 2 graph sets;
#   3. where `import tensorrt` works: `edgekit export MODEL --format tensorrt --precision fp16,int8`
#      (verified engines), benched below; where it does not, the one error edgekit gives;
#   4. `edgekit bench` of the single-graph bundles: onnxruntime@cpu and onnxruntime@cuda rows,
#      the engines, and each model's eager torch@cuda row, in one table + PNG; then ONNX
#      Runtime's TensorRT execution provider on the first bundle (a row, or why not);
#   5. SAM 2 graph sets (every bundle with an image_encoder graph): `edgekit bench-stream` on
#      onnxruntime@cuda and onnxruntime@cpu, and the card's torch graphs on torch@cuda:
#      per-frame p50/p90, FPS, late vs early frames.
# Measured with it on an NVIDIA H200: README, "On a GPU".
# Every step runs even when an earlier one fails; the exit status counts the failed steps.
#
# Usage: bash scripts/gpu_check.sh BUNDLE...
# Env:   OUT (default out/gpu-check), EDGEKIT (the CLI, default `edgekit`), ITERATIONS (200),
#        FRAMES (300), THREADS (CPU rows' intra-op threads, default 2 as on the edge boxes)
set -uo pipefail

OUT="${OUT:-out/gpu-check}"
EDGEKIT="${EDGEKIT:-edgekit}"
ITERATIONS="${ITERATIONS:-200}"
FRAMES="${FRAMES:-300}"
THREADS="${THREADS:-2}"
mkdir -p "$OUT/tensorrt" "$OUT/verify"
LOG="$OUT/gpu-check.log"
failed=0

step() {  # step TITLE CMD...: run CMD, log its output, count a failure
    local title="$1"
    shift
    echo "=== $title" | tee -a "$LOG"
    if ! "$@" 2>&1 | tee -a "$LOG"; then
        echo "--- FAILED: $title" | tee -a "$LOG"
        failed=$((failed + 1))
        return 1
    fi
}

manifest() {  # manifest BUNDLE KEY: a top-level string of bundle.json ("model")
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1] + "/bundle.json"))[sys.argv[2]])' \
        "$1" "$2"
}

if [[ $# -eq 0 ]]; then
    echo "usage: bash scripts/gpu_check.sh BUNDLE... (ONNX bundles built by edgekit export)" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$LOG"
step "runtimes" "$EDGEKIT" runtimes

models=()
sam2=()
others=()
for bundle in "$@"; do
    name="$(basename "$bundle")"
    model="$(manifest "$bundle" model)"
    [[ " ${models[*]} " == *" $model "* ]] || models+=("$model")
    if grep -q '"image_encoder"' "$bundle/bundle.json"; then sam2+=("$bundle"); else others+=("$bundle"); fi
    step "verify $name on onnxruntime@cuda" "$EDGEKIT" verify "$bundle" \
        --runtime onnxruntime@cuda --out "$OUT/verify/$name.json"
done

engines=()
if python3 -c "import tensorrt" 2>/dev/null; then
    for model in "${models[@]}"; do
        for precision in fp16 int8; do
            dir="$OUT/tensorrt/$model-$precision"
            step "export $model tensorrt-$precision" "$EDGEKIT" export "$model" --format tensorrt \
                --precision "$precision" --out "$dir" && engines+=("$dir")
        done
    done
else
    step "tensorrt (expected to name the missing package)" "$EDGEKIT" export "${models[0]}" \
        --format tensorrt --precision fp16 --no-verify --out "$OUT/tensorrt/probe"
fi

# Single graphs (SAM 2 graph sets are timed as a stream below): CPU and GPU rows in one table,
# the engines, and the eager torch@cuda rows of the models that are not SAM 2.
eager=()
for bundle in "${others[@]}"; do
    model="$(manifest "$bundle" model)"
    [[ " ${eager[*]} " == *" $model "* ]] || eager+=("$model")
done
if [[ ${#others[@]} -gt 0 ]]; then
    step "bench" "$EDGEKIT" bench "${others[@]}" "${engines[@]}" "${eager[@]}" \
        --runtime onnxruntime@cpu --runtime onnxruntime@cuda --runtime tensorrt \
        --runtime torch@cuda --iterations "$ITERATIONS" --threads "$THREADS" \
        --out "$OUT/bench.json" --plot "$OUT/bench.png"
fi
# ONNX Runtime's TensorRT execution provider on one bundle: a row, or the error naming why not.
step "onnxruntime@tensorrt probe" "$EDGEKIT" bench "${others[0]:-$1}" --runtime onnxruntime@tensorrt \
    --iterations "$ITERATIONS" --out "$OUT/bench-ort-trt.json"

if [[ ${#sam2[@]} -gt 0 ]]; then
    sam2_model="$(manifest "${sam2[0]}" model)"
    step "bench-stream" "$EDGEKIT" bench-stream "${sam2[@]}" --runtime onnxruntime@cuda \
        --runtime onnxruntime@cpu --torch "$sam2_model" --runtime torch@cuda \
        --frames "$FRAMES" --threads "$THREADS" --out "$OUT/stream"
fi

python3 - "$OUT" <<'EOF' | tee -a "$LOG"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("\nverify on the GPU: bundle, runtime:device, passed, task metrics torch -> artifact")
for path in sorted((out / "verify").glob("*.json")):
    d = json.loads(path.read_text())
    ref, got = (d.get("task") or {}).get("reference", {}), (d.get("task") or {}).get("candidate", {})
    metric = ", ".join(f"{k} {ref[k]:.4g} -> {got.get(k, float('nan')):.4g}" for k in ref)
    print(f"  {path.stem:26s} {d.get('runtime', '?'):20s} {d.get('passed')!s:5s} {metric}")
EOF
echo "gpu check: $failed step(s) failed; log $LOG" | tee -a "$LOG"
exit "$failed"
