# shardstock — the two commands a fresh machine needs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
BIN := bin/shardstock
REDIS := deploy/redis.sh
MARIADB := deploy/mariadb.sh
ROCKETMQ := deploy/rocketmq.sh
# The quick start's admin token; set your own for anything but a local try.
SHARDSTOCK_ADMIN_TOKEN ?= local-dev-admin-token
SHARDSTOCK_HTTP_ADDR ?= 127.0.0.1:8080
BENCHTIME ?= 3s
MQ ?= streams

.PHONY: build run stop reset test vet bench profile-redis profile-fullstack fuzz soak clean help
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

build: ## build bin/shardstock
	$(GO) build -o $(BIN) ./cmd/shardstock

run: build ## start 3 Redis masters and the server on the embedded defaults (Streams + SQLite); MQ=rocketmq runs the full stack (RocketMQ + MariaDB); data in run/streams/ or run/rocketmq/
	@SHARDSTOCK_ADMIN_TOKEN=$(SHARDSTOCK_ADMIN_TOKEN) SHARDSTOCK_HTTP_ADDR=$(SHARDSTOCK_HTTP_ADDR) deploy/run.sh start $(MQ)

stop: ## stop what `make run` started: the server (by its pid file), Redis, and RocketMQ and MariaDB
	@deploy/run.sh stop

reset: ## stop, then delete the data of both `make run` modes (asks first; FORCE=1 does not ask)
	@FORCE=$(FORCE) deploy/run.sh reset

vet:
	$(GO) vet ./...

test: ## install and start what the tests need (Redis, MariaDB, RocketMQ, Prometheus, Chromium, nginx, buildah/podman, helm, Schemathesis), vet, run every test with the race detector, then the README quick-start test and the fuzzers
	$(REDIS) install
	$(MARIADB) install
	deploy/prometheus.sh install
	deploy/chromium.sh install
	deploy/nginx.sh install
	deploy/image.sh install
	deploy/helm.sh install
	deploy/schemathesis.sh install
	$(ROCKETMQ) fetch
	$(GO) vet ./...
	deploy/with-services.sh $(GO) test -race -count=1 -p 1 -timeout 40m ./...
	@echo "README quick start on a fresh clone (make run in both modes, every command, make stop):"
	SHARDSTOCK_TEST_README=1 $(GO) test -count=1 -timeout 15m -run '^TestReadmeQuickStartIsTrue$$' ./cmd/shardstock/
	@$(MAKE) --no-print-directory fuzz
	@cat artifacts/chaos-report.txt artifacts/cluster-report.txt

SOAK ?= 30m
MODE ?= redis
soak: ## run the model-based test of the stock path for SOAK (default 30m) on each database, printing every history; MODE=fast runs it on in-memory shards (miniredis, the real Lua scripts) on a fake clock (testing/synctest), SQLite only
ifeq ($(MODE),fast)
	set -o pipefail; SHARDSTOCK_MODEL_FAST=1 SHARDSTOCK_MODEL_BUDGET=$(SOAK) SHARDSTOCK_MODEL_SOAK=1 \
	  $(GO) test -count=1 -timeout 0 -run '^TestModelStockPath$$' -v ./cmd/shardstock/ 2>&1 | grep --line-buffered -v '\[rapid\] draw'
else
	$(REDIS) install
	$(MARIADB) install
	$(ROCKETMQ) fetch
	set -o pipefail; deploy/with-services.sh env SHARDSTOCK_MODEL_BUDGET=$(SOAK) SHARDSTOCK_MODEL_SOAK=1 \
	  $(GO) test -count=1 -timeout 0 -run '^TestModelStockPath$$' -v ./cmd/shardstock/ 2>&1 | grep --line-buffered -v '\[rapid\] draw'
endif

FUZZTIME ?= 5s
# Fuzz inputs that write files (FuzzSpoolOpen fsyncs on every run) go to
# tmpfs when there is one: on a shared disk an fsync can stall for seconds,
# and a worker stalled when the fuzz time ends fails the run with "context
# deadline exceeded". tmpfs also runs such a target ~200x more often.
FUZZ_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo $${TMPDIR:-/tmp})
FUZZ_TARGETS := FuzzValidID:. FuzzDecodeMessages:. FuzzDecodeStrict:./api FuzzTokenIdentity:./flashsale FuzzSpoolOpen:./spool

# go test -fuzz passes when its pattern matches no fuzz function ("no fuzz
# tests to fuzz"), so a target left behind by a move would pass unfuzzed:
# fuzz fails when a fuzz function of the tree is not in FUZZ_TARGETS, or a
# listed one did not run.
fuzz: ## run every fuzz target for FUZZTIME (default 5s); findings land in testdata/fuzz as regression cases
	@missing=$$(grep -rE --include='*_test.go' --exclude-dir=run --exclude-dir=.git -o '^func Fuzz[A-Za-z0-9_]*' . \
	  | sed -E 's#^\./(.*)/[^/]*:func (.*)#\2:./\1#; s#^\./[^/]*:func (.*)#\1:.#' \
	  | while read -r t; do case " $(FUZZ_TARGETS) " in *" $$t "*) ;; *) echo "$$t";; esac; done); \
	[ -z "$$missing" ] || { echo "fuzz: not in FUZZ_TARGETS (Makefile):" $$missing; exit 1; }; \
	log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
	  name=$${t%%:*}; pkg=$${t#*:}; \
	  echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
	  before=$$(ls $$pkg/testdata/fuzz/$$name 2>/dev/null | wc -l); \
	  if ! TMPDIR=$(FUZZ_TMPDIR) $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg >"$$log" 2>&1; then \
	    if grep -q 'context deadline exceeded' "$$log" && [ "$$(ls $$pkg/testdata/fuzz/$$name 2>/dev/null | wc -l)" = "$$before" ]; then \
	      echo "fuzz $$name: 'context deadline exceeded' at the end with no failing input written: Go 1.26's fuzz coordinator race (golang/go#75804, fixed in 1.27); once more"; \
	      TMPDIR=$(FUZZ_TMPDIR) $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg >"$$log" 2>&1 || { cat "$$log"; exit 1; }; \
	    else cat "$$log"; exit 1; fi; \
	  fi; \
	  grep -qE '^fuzz: elapsed' "$$log" || { cat "$$log"; echo "fuzz: $$name matches no fuzz function in $$pkg"; exit 1; }; \
	  grep -E '^fuzz: elapsed' "$$log" | tail -1; \
	done

profile-redis: ## where a purchase's Redis CPU goes: perf on a redis-server built with symbols (deploy/bench/redis-profile.sh)
	deploy/bench/redis-profile.sh

profile-fullstack: ## where the full stack's CPU goes under make bench's load: every process profiled, into run/profile-fullstack (deploy/bench/fullstack.sh)
	BENCH_ROUNDS=0 BENCH_PROFILE=$(CURDIR)/run/profile-fullstack deploy/bench/fullstack.sh

bench: ## side-by-side benchmark (HTTP and Redis ceilings vs the purchase path, the full stack vs the embedded mode; rewrites BENCHMARKS.md), then the Go benchmarks
	deploy/bench.sh
	deploy/bench/fullstack.sh
	$(REDIS) install
	$(MARIADB) install
	$(ROCKETMQ) fetch
	deploy/with-services.sh bash -c '$(GO) test -run "^$$" -bench . -benchtime $(BENCHTIME) ./shard/ && \
	  $(GO) test -run "^$$" -bench OrderPipeline -benchtime 3000x ./cmd/shardstock/'
	@echo "the memory a 1M-unit sale holds on 3 shards before its archive (about 2 min):"
	SHARDSTOCK_MEASURE_UNITS=1000000 $(GO) test -count=1 -timeout 20m -run '^TestMeasureSaleMemory$$' -v ./shard/ | grep -E 'units on|^ok|FAIL'

clean: ## delete the build output and the test runs' data (not the quick start's: see make reset)
	[ ! -d run/test/mariadb ] || SHARDSTOCK_MARIADB_DIR=run/test/mariadb deploy/mariadb.sh remove
	[ ! -d run/test/rocketmq ] || SHARDSTOCK_RMQ_DIR=run/test/rocketmq deploy/rocketmq.sh remove
	rm -rf bin run/test run/bench
