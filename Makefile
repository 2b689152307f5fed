# Set-up and entry points. `make test` and `make demo` work on a fresh machine: they create the
# virtual environment, install torch/torchvision and the package, then run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mr2-installed
ARCH := $(shell uname -m)
# The torch/torchvision pair pip can install on this platform (x86_64: a CUDA build that runs on CPU).
ifeq ($(ARCH),aarch64)
TORCH_SPEC ?= torch==2.9.1 torchvision==0.24.1
else
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
endif
FMNIST_DIR ?= /usr/share/datasets/fashion-mnist

.PHONY: install test lint unit quick demo data bench clean

# One line per step (pip itself is --quiet): the torch download is most of the time.
$(STAMP): pyproject.toml
	@echo "make install: [1/4] creating the virtual environment $(VENV) ($(PYTHON) -m venv)"
	@$(PYTHON) -m venv $(VENV)
	@echo "make install: [2/4] upgrading pip"
	@$(PY) -m pip install --quiet --upgrade pip
	@echo "make install: [3/4] installing $(TORCH_SPEC) (the largest download: most of the install's time)"
	@$(PY) -m pip install --quiet $(TORCH_SPEC)
	@echo "make install: [4/4] installing mr2 and its development tools (pip install -e '.[dev]')"
	@$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)
	@echo "make install: done; activate it with 'source $(VENV)/bin/activate', or run $(VENV)/bin/mr2 and $(VENV)/bin/python"

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

# The slowest tests are listed at the end of every run (--durations), so a slow new test shows.
# TEST_WORKERS pytest-xdist workers (0: in this process): many tests wait on the subprocesses they
# start (trainers, torchrun, submitit jobs, the CLI), so two workers keep two cores busy.
TEST_WORKERS ?= 2
unit: $(STAMP)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --durations=25

# The fast part of the suite for the edit-test loop: no slow or distributed tests and none of the
# modules that start many subprocesses or train end to end (QUICK_SKIP, chosen from the --durations
# of a full run). It is not a substitute for `make test`, which CI runs.
QUICK_SKIP := tests/docs tests/sweep tests/integrations tests/engine/test_run_directory.py \
	tests/engine/test_os_errors.py tests/engine/test_ddp_engine.py tests/tune/test_tune_command.py \
	tests/tune/test_tune_script.py tests/tune/test_tune_fashion_mnist.py tests/tune/test_tune_runs.py \
	tests/tune/test_trial_cleanup.py tests/methods/test_representation_engine.py \
	tests/methods/test_seam_engine.py tests/report/test_fuzz_predictions.py \
	tests/report/test_predictions_memory.py tests/package/test_cli_startup.py tests/benchmarks \
	tests/tune/test_trial_identity.py tests/tune/test_design_operating_characteristics.py \
	tests/tune/test_trial_tune.py tests/metrics/test_classwise_disparity.py \
	tests/engine/test_common_random_numbers.py tests/data/test_arrays.py
QUICK_DURATIONS ?= 10
quick: $(STAMP)
	$(VENV)/bin/pytest -m "not slow and not distributed" --durations=$(QUICK_DURATIONS) $(foreach path,$(QUICK_SKIP),--ignore=$(path))

test: lint unit

# Fashion-MNIST: the Debian package where apt is available; otherwise mr2 tells how to obtain it.
data:
	@if [ ! -f $(FMNIST_DIR)/train-images-idx3-ubyte.gz ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist; fi

demo: $(STAMP) data
	$(VENV)/bin/mr2 demo

bench: $(STAMP)
	$(PY) benchmarks/bench_mr2_loss.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
