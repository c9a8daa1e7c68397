# edgekit — the two commands a new user needs: `make demo` and `make test`.
# Both create the virtual environment on first use (torch 2.13.0 CPU first, then edgekit).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.edgekit-installed
TORCH ?= torch==2.13.0
THREADS ?= 2

.PHONY: setup videos demo test lint format bench bench-optimum clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[export,dev,ray,video]'
	# test-only: Meta's SAM 2 code for the parity tests; no deps and no build isolation, since
	# its torch/torchvision requirements would pull a CUDA torch (it builds against ours)
	SAM2_BUILD_CUDA=0 $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation sam2==1.1.0
	$(BIN)/python -m pip install --quiet hydra-core iopath
	touch $(STAMP)

## OpenCV's recorded sample videos (a real-video evaluation set) into the cache, once: they come
## from its source distribution on PyPI (96 MB, checked by SHA-256; see docs/sam2.md).
videos: $(STAMP)
	@$(BIN)/python -m edgekit.segmentation.sample_videos

setup: $(STAMP) videos

## Export the demo models to every format this machine supports, verify, benchmark side by side.
demo: $(STAMP)
	$(BIN)/edgekit demo --threads $(THREADS)

## Headless Chromium for the daemon's web-page test (Debian packages; skipped if apt is unavailable).
BROWSER_STAMP := $(VENV)/.edgekit-browser
$(BROWSER_STAMP):
	@if command -v chromedriver >/dev/null && command -v chromium >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
		|| (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null) \
		|| echo "could not install chromium; the browser test will be skipped"; \
	else echo "install Debian's chromium and chromium-driver to run the browser test"; fi
	touch $(BROWSER_STAMP)

## The test suite (what CI runs), one worker per core up to 4 (TEST_WORKERS=1: one process);
## each test file runs whole on one worker. Prints the ten slowest tests and the wall time.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
test: $(STAMP) $(BROWSER_STAMP) videos
	@start=$$(date +%s); $(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 \
		-n $(TEST_WORKERS) --dist loadfile; rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s wall, exit $$rc, cache $${EDGEKIT_CACHE:-$$HOME/.cache/edgekit}"; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## MiniLM side by side with Hugging Face Optimum (builds Optimum in its own venv).
MINILM_STRICT := --keep-float '.*layer\.[3-5]/output/dense/MatMul.*'
bench-optimum: $(STAMP)
	$(BIN)/edgekit export minilm --format onnx --precision fp32,int8
	$(BIN)/edgekit export minilm --format openvino --precision int8
	$(BIN)/edgekit export minilm --format openvino --precision int8 $(MINILM_STRICT) --out bundles/minilm-openvino-int8-strict
	bash scripts/bench_optimum_peer.sh bundles/minilm-onnx-fp32 bundles/minilm-onnx-int8 \
		bundles/minilm-openvino-int8 bundles/minilm-openvino-int8-strict

clean:
	rm -rf bundles out
