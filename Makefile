# `make test` and `make bench` work on a fresh clone: they create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first and explicitly, so that no later install can pull a newer (multi-GB) build.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# pytest-xdist processes for `make test` and `make test-floor` (0: one process, no xdist);
# worksteal: a worker that runs out takes tests from the other, so one slow test is not a tail.
TEST_WORKERS ?= 2
PYTEST_ARGS ?= -n $(TEST_WORKERS) --dist worksteal

# `make test-floor`: the oldest versions pyproject.toml accepts, in their own venv, with no
# optional package (as the lent GPU machine), on the fast subset of the tests.
FLOOR_VENV ?= .venv-floor
FLOOR_SPEC ?= torch==2.11.0 torchvision==0.26.0
FLOOR_TESTS ?= tests/contract tests/data/test_loader.py tests/data/test_loader_fake_cuda.py \
	tests/data/test_ragged_pad.py tests/transforms/test_cuda_graph.py

.PHONY: test test-floor bench docs install clean

$(VENV)/.installed-%: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[$*]" $(TORCH_SPEC)
	# torchaug (a `batchaug bench` contender, tested by the bench tests) pins its own torch
	$(PY) -m pip install -q --no-deps "torchaug==0.6.1"
	touch $@

# `make test` also installs the docs extra, so that tests/docs/test_docs.py builds the site (-W).
install: $(VENV)/.installed-test,docs

test: $(VENV)/.installed-test,docs
	$(PY) -m pytest -q $(PYTEST_ARGS)

$(FLOOR_VENV)/.installed: pyproject.toml
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install -q $(FLOOR_SPEC) numpy pillow tqdm "pytest>=7" \
		"hypothesis>=6.80" "pytest-xdist>=3.5"
	$(FLOOR_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

test-floor: $(FLOOR_VENV)/.installed
	$(FLOOR_VENV)/bin/python -m pytest -q $(PYTEST_ARGS) $(FLOOR_TESTS)

# The site in docs/_build/html: the gallery's pictures first (scikit-image photographs), then
# Sphinx with warnings as errors.
docs: $(VENV)/.installed-test,docs
	$(PY) docs/gallery.py
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

# `make bench` compares all three recipes (about 4 minutes on 2 cores: equal windows, 5 rounds); e.g.
# `make bench BENCH_ARGS="--recipe cifar --train"` for the training data-wait comparison.
bench: $(VENV)/.installed-bench
	$(VENV)/bin/batchaug bench $(or $(BENCH_ARGS),--recipe all)

clean:
	rm -rf $(VENV) $(FLOOR_VENV) bench-results .pytest_cache .hypothesis
