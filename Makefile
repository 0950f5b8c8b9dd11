# vispe: `make demo` runs the main job on embedded data, `make test` runs the tests.
# Both bootstrap .venv (pinned packages, open3d's system library) and are safe to run twice.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# make test runs the tests in one pytest-xdist worker per core (at most 8: each can hold a few GB); tests/conftest.py
# gives each worker its share of the cores as torch threads. loadgroup spreads the tests one by one, except those
# marked xdist_group (modules whose tests share an expensive fixture), which stay on one worker.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 8 ] && n=8; echo $$n)
# A new .venv takes about 7 GB (torch with its CUDA libraries, triton, open3d); pip's own "No space left on
# device" comes only after minutes of installing, so the bootstrap checks first.
VENV_MIN_FREE_GB ?= 9

.PHONY: demo demo-full test test-floor lint venv sysdeps clean leaderboard leaderboard-video demo-dit demo-points demo-cameras docs docs-serve docs-figures

demo: $(STAMP)
	$(PY) tools/demo.py

# The demo at full depth: 30 epochs per run instead of 10 and every resolution strategy (roughly three times as long).
demo-full: $(STAMP)
	$(PY) tools/demo.py --full

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# ruff (lint and format) over the code, mypy over vispe/ (its settings: [tool.mypy] in pyproject.toml); CI runs it
lint: $(STAMP)
	$(VENV)/bin/ruff check vispe vispe_launcher.py tools tests tests_floor configs workbench examples
	$(VENV)/bin/ruff format --check vispe vispe_launcher.py tools tests tests_floor configs workbench examples
	$(PY) -m mypy

# The tested install range: a fresh .venv-floor (about 7 GB, torch's CUDA wheels from PyPI; 3-4 minutes) holding
# setup.py's floor versions, vispe installed from this checkout with `pip install .` (not editable) beside a torch
# that was there first, and the smoke suite tests_floor/ run from outside the checkout. tests_floor/floor.py also
# checks the README's claim: a plain `pip install .` would replace a torch that has no torchvision beside it, while
# `pip install . "torch==<installed>"` keeps it. On success install-floor.json records the versions that passed
# (commit it); make test checks that setup.py's floors equal them. Run it whenever a floor in setup.py changes.
FLOOR_VENV := .venv-floor
FLOOR_PY := $(FLOOR_VENV)/bin/python
FLOOR_PINS := $(FLOOR_VENV)/floor-pins.txt
FLOOR_PIP := $(FLOOR_PY) -m pip --disable-pip-version-check
FLOOR_MIN_FREE_GB ?= 9

test-floor:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=python3"; exit 1; }
	rm -rf $(FLOOR_VENV)
	@free_kb=$$(df -Pk . | awk 'NR == 2 {print $$4}'); \
		if [ "$$free_kb" -lt $$(( $(FLOOR_MIN_FREE_GB) * 1024 * 1024 )) ]; then \
			echo "error: $(FLOOR_VENV) needs about $(FLOOR_MIN_FREE_GB) GB free on this disk, and $$(( free_kb / 1024 / 1024 )) GB are free;" \
				"free some space and run make test-floor again (make FLOOR_MIN_FREE_GB=N changes the threshold)"; \
			exit 1; fi
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_PY) tests_floor/floor.py pins $(FLOOR_PINS)
	$(FLOOR_PIP) install --quiet "$$(grep '^torch==' $(FLOOR_PINS))"
	rm -rf build
	$(FLOOR_PY) tests_floor/floor.py keep-torch $(FLOOR_PINS)
	$(FLOOR_PIP) install --quiet -c $(FLOOR_PINS) pytest
	$(FLOOR_PIP) check
	tmp=$$(mktemp -d) && cp tests_floor/test_*.py $$tmp/ && \
		(cd $$tmp && VISPE_CHECKOUT=$(CURDIR) $(CURDIR)/$(FLOOR_PY) -m pytest -q -p no:cacheprovider test_floor_smoke.py \
			> smoke.log 2>&1; rc=$$?; cat smoke.log; exit $$rc) && \
		$(FLOOR_PY) tests_floor/floor.py record install-floor.json $$tmp/smoke.log && rm -rf $$tmp

venv: $(STAMP)

# The stamp depends on the pins: editing requirements.txt or setup.py reinstalls.
$(STAMP): requirements.txt setup.py pyproject.toml | sysdeps
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=python3"; exit 1; }
	@test -x $(PY) || { free_kb=$$(df -Pk . | awk 'NR == 2 {print $$4}'); \
		if [ "$$free_kb" -lt $$(( $(VENV_MIN_FREE_GB) * 1024 * 1024 )) ]; then \
			echo "error: creating $(VENV) needs about $(VENV_MIN_FREE_GB) GB free on this disk, and $$(( free_kb / 1024 / 1024 )) GB are free;" \
				"free some space (for example old clones' .venv folders or /tmp/torchinductor_*) and run make again"; \
			exit 1; fi; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

# open3d links libusb-1.0 at import time; install it where it is missing (Debian/Ubuntu, as root or with sudo).
sysdeps:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then \
		echo "installing libusb-1.0-0 (needed by open3d)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libusb-1.0-0 >/dev/null; \
	fi

clean:
	rm -rf $(VENV) outputs work_dirs .pytest_cache

# The encoding leaderboard: every encoding x {position, relation} x 3 seeds (an hour or more on CPU; not in CI).
leaderboard: $(STAMP)
	$(PY) tools/leaderboard.py

# The video block of the leaderboard: the video encodings x ShapesVideo direction x 3 seeds, swept over frame counts
# and frame sizes (several hours on CPU; not in CI).
leaderboard-video: $(STAMP)
	$(PY) tools/leaderboard_video.py --jobs 2

# The DiT demo: DiT-Ti/4 with four encodings on shapes2d, sampled at 1x, 1.5x, 2x (about an hour on CPU; not in CI).
demo-dit: $(STAMP)
	$(PY) tools/demo_dit.py

# The point-cloud demo: the tiny point transformer on primitives3d with four encodings, tested at unseen point
# counts and object scales (about 40 minutes on CPU; not in CI).
demo-points: $(STAMP)
	$(PY) tools/demo_points.py

# The camera demo: the multi-view transformer with none / plucker / petr / gta, tested at unseen fields of view,
# image sizes, view counts and distances (about an hour on CPU; not in CI).
demo-cameras: $(STAMP)
	$(PY) tools/demo_cameras.py

# The documentation site (mkdocs.yml, pages in docs/) built into site/ in strict mode: a broken link or a docstring
# reference that does not resolve fails. mkdocstrings reads vispe's source without importing it, so this needs only
# the pinned requirements-docs.txt, installed into .venv under its own stamp (make test never needs them).
DOCS_STAMP := $(VENV)/.docs-installed

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The built site at http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops it): search works there without a network, where
# site/index.html opened as a file needs one for its search (the theme loads a small script from the web).
DOCS_PORT ?= 8000
docs-serve: docs
	@echo "serving site/ at http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops)"
	$(PY) -m http.server $(DOCS_PORT) --bind 127.0.0.1 --directory site

$(DOCS_STAMP): requirements-docs.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || test -x $(PY) || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=python3"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-docs.txt
	touch $(DOCS_STAMP)

# The encoding pages' pictures (workbench/encoding_figures.py: vispe show-encoding's functions, the model zoo for
# the trained ones), redrawn into docs/; about 10 seconds on 2 cores.
docs-figures: $(STAMP)
	$(PY) workbench/encoding_figures.py
