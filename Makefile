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

.PHONY: build run stop test vet bench clean help
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

build: ## build bin/shardstock
	$(GO) build -o $(BIN) ./cmd/shardstock

run: build ## start 3 Redis masters (ports 6479/6579/6679, AOF on) and the server on the embedded defaults
	@$(REDIS) start
	@echo
	@echo "shardstock on http://$(SHARDSTOCK_HTTP_ADDR) — try, in another terminal:"
	@echo "  curl -s -X PUT -H 'Authorization: Bearer $(SHARDSTOCK_ADMIN_TOKEN)' -H 'Content-Type: application/json' \\"
	@echo "       -d '{\"stock\":1000,\"per_user_limit\":1}' http://$(SHARDSTOCK_HTTP_ADDR)/admin/v1/products/lamp"
	@echo "  curl -s -X POST -H 'X-User-ID: alice' http://$(SHARDSTOCK_HTTP_ADDR)/api/v1/products/lamp/purchase"
	@echo "  curl -s -H 'Authorization: Bearer $(SHARDSTOCK_ADMIN_TOKEN)' http://$(SHARDSTOCK_HTTP_ADDR)/admin/v1/products/lamp"
	@echo "Ctrl-C stops the server; 'make stop' stops the Redis masters."
	@echo
	SHARDSTOCK_SHARDS=$$($(REDIS) urls) SHARDSTOCK_ADMIN_TOKEN=$(SHARDSTOCK_ADMIN_TOKEN) \
	  SHARDSTOCK_HTTP_ADDR=$(SHARDSTOCK_HTTP_ADDR) $(BIN) serve

stop: ## stop the Redis masters that `make run` started
	$(REDIS) stop

vet:
	$(GO) vet ./...

test: ## install and start what the tests need (Redis, MariaDB, RocketMQ), vet, run every test with the race detector
	$(REDIS) install
	$(MARIADB) install
	$(ROCKETMQ) fetch
	$(GO) vet ./...
	deploy/with-services.sh $(GO) test -race -count=1 -p 1 -timeout 20m ./...

bench: ## run the Go benchmarks against real Redis masters
	$(REDIS) install
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./...

clean:
	rm -rf bin
