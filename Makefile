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

.PHONY: build run stop test vet bench fuzz clean help
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

build: ## build bin/shardstock
	$(GO) build -o $(BIN) ./cmd/shardstock

run: build ## start 3 Redis masters and the server on the embedded defaults (Streams + SQLite); MQ=rocketmq runs the full stack (RocketMQ + MariaDB)
	@$(REDIS) start
	@if [ "$(MQ)" = rocketmq ]; then $(MARIADB) start && $(ROCKETMQ) start; fi
	@echo
	@echo "shardstock on http://$(SHARDSTOCK_HTTP_ADDR) — try, in another terminal:"
	@echo "  curl -s -X PUT -H 'Authorization: Bearer $(SHARDSTOCK_ADMIN_TOKEN)' -H 'Content-Type: application/json' \\"
	@echo "       -d '{\"stock\":1000,\"per_user_limit\":1}' http://$(SHARDSTOCK_HTTP_ADDR)/admin/v1/products/lamp"
	@echo "  curl -s -X POST -H 'X-User-ID: alice' http://$(SHARDSTOCK_HTTP_ADDR)/api/v1/products/lamp/purchase"
	@echo "  curl -s -H 'X-User-ID: alice' http://$(SHARDSTOCK_HTTP_ADDR)/api/v1/orders/ORDER_ID"
	@echo "  curl -s -X POST -H 'X-User-ID: alice' -H 'Content-Type: application/json' -d '{\"result\":\"success\"}' \\"
	@echo "       http://$(SHARDSTOCK_HTTP_ADDR)/api/v1/orders/ORDER_ID/pay"
	@echo "  curl -s -H 'Authorization: Bearer $(SHARDSTOCK_ADMIN_TOKEN)' http://$(SHARDSTOCK_HTTP_ADDR)/admin/v1/products/lamp"
	@echo "Ctrl-C stops the server; 'make stop' stops Redis (and RocketMQ and MariaDB)."
	@echo
	SHARDSTOCK_SHARDS=$$($(REDIS) urls) SHARDSTOCK_ADMIN_TOKEN=$(SHARDSTOCK_ADMIN_TOKEN) \
	  SHARDSTOCK_HTTP_ADDR=$(SHARDSTOCK_HTTP_ADDR) \
	  SHARDSTOCK_MQ=$$(if [ "$(MQ)" = rocketmq ]; then echo rocketmq://127.0.0.1:9876; else echo streams; fi) \
	  SHARDSTOCK_DB=$$(if [ "$(MQ)" = rocketmq ]; then $(MARIADB) dsn; else echo sqlite:./data/orders.db; fi) \
	  $(BIN) serve

stop: ## stop what `make run` started
	$(REDIS) stop
	$(ROCKETMQ) stop
	$(MARIADB) stop

vet:
	$(GO) vet ./...

test: ## install and start what the tests need (Redis, MariaDB, RocketMQ, Prometheus, Chromium, nginx), vet, run every test with the race detector, then the fuzzers
	$(REDIS) install
	$(MARIADB) install
	deploy/prometheus.sh install
	deploy/chromium.sh install
	deploy/nginx.sh install
	$(ROCKETMQ) fetch
	$(GO) vet ./...
	deploy/with-services.sh $(GO) test -race -count=1 -p 1 -timeout 20m ./...
	@$(MAKE) --no-print-directory fuzz
	@cat artifacts/chaos-report.txt

FUZZTIME ?= 5s
# Fuzz inputs that write files (FuzzSpoolOpen fsyncs on every run) go to
# tmpfs when there is one: on a shared disk an fsync can stall for seconds,
# and a worker stalled when the fuzz time ends fails the run with "context
# deadline exceeded". tmpfs also runs such a target ~200x more often.
FUZZ_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo $${TMPDIR:-/tmp})
FUZZ_TARGETS := FuzzValidID:. FuzzDecodeMessages:. FuzzDecodeStrict:./api FuzzTokenIdentity:./flashsale FuzzSpoolOpen:./ha

fuzz: ## run every fuzz target for FUZZTIME (default 5s); findings land in testdata/fuzz as regression cases
	@for t in $(FUZZ_TARGETS); do \
	  name=$${t%%:*}; pkg=$${t#*:}; \
	  echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
	  TMPDIR=$(FUZZ_TMPDIR) $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/shardstock-fuzz.log 2>&1 \
	    || { cat /tmp/shardstock-fuzz.log; exit 1; }; \
	  grep -E '^fuzz: elapsed' /tmp/shardstock-fuzz.log | tail -1; \
	done

bench: ## side-by-side benchmark (HTTP and Redis ceilings vs the purchase path; rewrites BENCHMARKS.md), then the Go benchmarks
	deploy/bench.sh
	$(REDIS) install
	$(MARIADB) install
	$(ROCKETMQ) fetch
	deploy/with-services.sh bash -c '$(GO) test -run "^$$" -bench . -benchtime $(BENCHTIME) ./shard/ && \
	  $(GO) test -run "^$$" -bench OrderPipeline -benchtime 3000x ./cmd/shardstock/'

clean:
	rm -rf bin
