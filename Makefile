# Stepscope. `make run` starts everything on a laptop; `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Each pytest process imports the whole suite's modules (torch, transformers, datasets
# among them); without bytecode caches it compiles them again every run, which took
# collection from 35 s to 82 s here. A shell that sets PYTHONDONTWRITEBYTECODE keeps it
# for itself; make's commands write their caches (they are git-ignored).
unexport PYTHONDONTWRITEBYTECODE

KATEX_VERSION := 0.19.1
KATEX_SHA256 := 24da5a599eb2fcede2e270b99a6ff48bca816beecc95feeb84e8cccbd1bb34fd

.PHONY: vendor-katex run stop test test-fast test-system test-system-all lint format typecheck bench bench-load install services worker migrate demo clean browser

$(STAMP): pyproject.toml client/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch that lies on this disk; a plain `torch` pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	# The Python client (client/), its own package; tests/client drives it against a live server.
	$(PY) -m pip install --quiet -e ./client
	touch $(STAMP)

# The import helper's hot modules compiled with mypyc (skipped, with a word why, where
# they cannot be; they then run as plain Python). Rebuilt only when their sources change.
install: $(STAMP)
	$(PY) -m trajectories.compiled build

services: install
	$(PY) -m stepscope.processes up

migrate: services
	$(PY) manage.py migrate --no-input

demo: migrate
	$(PY) manage.py demo_setup

worker: migrate
	$(PY) -m stepscope.processes worker
	$(PY) -m stepscope.processes rewards

# Our own error pages; STEPSCOPE_DEBUG=1 make run shows Django's tracebacks instead.
run: demo worker
	STEPSCOPE_DEBUG=$${STEPSCOPE_DEBUG:-0} $(PY) manage.py runserver 127.0.0.1:8000

stop:
	$(PY) -m stepscope.processes down

# The browser tests drive Debian's Chromium (Playwright cannot download browsers here).
browser:
	@command -v chromium >/dev/null || { \
	    echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# Test processes (pytest-xdist): one per core. Each has its own database, Redis keys and
# files (tests/isolation.py), so two runs on one machine never meet.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

test: services browser
	$(PYTEST)

# The inner loop: the tests that need no database, broker, worker or browser (the
# Django-free modules and unit tests).
test-fast: install
	$(PYTEST) --fast -q

# The tests whose point is the servers (workers, the broker, the deployed stack,
# PostgreSQL-specific behaviour) against PostgreSQL and Redis on 127.0.0.1, what
# docker-compose provides; `make test-system-all` runs the whole suite there.
SYSTEM_SERVICES := DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/stepscope} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-redis://127.0.0.1:6379/0}

test-system: install browser
	$(SYSTEM_SERVICES) $(PYTEST) -m "celery or stack or services"

test-system-all: install browser
	$(SYSTEM_SERVICES) $(PYTEST)

lint: install typecheck
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

typecheck: install
	$(VENV)/bin/mypy .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: migrate
	$(PY) bench/ingest.py
	$(PY) bench/label_load.py
	$(PY) bench/scoring.py
	$(PY) bench/compare.py
	$(PY) bench/export.py

# 50 annotators labelling through gunicorn for 5 minutes while a scoring run and an export
# run (the whole stack in a temporary directory, or on DATABASE_URL / CELERY_BROKER_URL).
bench-load: install
	$(PY) bench/load.py

clean: stop
	rm -rf .stepscope staticfiles .build

# KaTeX as static/vendor/katex holds it (see its README): fetched from npm, checked,
# trimmed to the woff2 fonts.
vendor-katex:
	rm -rf .build/katex && mkdir -p .build/katex
	cd .build/katex && npm pack --silent katex@$(KATEX_VERSION) >/dev/null
	echo "$(KATEX_SHA256)  .build/katex/katex-$(KATEX_VERSION).tgz" | sha256sum -c -
	tar -xzf .build/katex/katex-$(KATEX_VERSION).tgz -C .build/katex
	rm -rf static/vendor/katex/fonts static/vendor/katex/contrib && mkdir -p static/vendor/katex/fonts static/vendor/katex/contrib
	cp .build/katex/package/LICENSE .build/katex/package/dist/katex.min.js static/vendor/katex/
	cp .build/katex/package/dist/contrib/copy-tex.min.js static/vendor/katex/contrib/
	cp .build/katex/package/dist/fonts/*.woff2 static/vendor/katex/fonts/
	sed -E 's/src:url\((fonts\/[^)]+\.woff2)\) format\("woff2"\)(,url\([^)]+\) format\("[a-z]+"\))+/src:url(\1) format("woff2")/g' \
	    .build/katex/package/dist/katex.min.css > static/vendor/katex/katex.min.css
