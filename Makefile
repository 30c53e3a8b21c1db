# Two commands a fresh machine needs: `make run` and `make test`.
# Everything installs into .venv from the hashed lock; the venv is remade when the lock changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements-dev.lock

.PHONY: install run test lint typecheck bench lock clean image-test

install: $(VENV)/.installed

$(VENV)/.installed: $(LOCK)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r $(LOCK)
	touch $@

run: install
	$(BIN)/python app.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

# Builds the Containerfile with podman and smoke-tests the image (as root; see .ci/image-test).
# Not part of `make test`: it needs podman and takes its own minute or two.
image-test:
	bash .ci/image-test

bench: install
	$(BIN)/python bench/run.py

# Refresh both locks from pyproject.toml (needs uv: `pip install uv`).
lock:
	uv pip compile pyproject.toml --generate-hashes --python-version 3.11 -q -o requirements.lock
	uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -q -o requirements-dev.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
