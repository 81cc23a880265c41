#!/usr/bin/env bash
# Start the shared services the test suite needs (MariaDB and RocketMQ, each
# in its own directory under run/test/), run the given command with their
# addresses in the environment, then stop them — also when the command fails.
#
#   deploy/with-services.sh go test ./...
#
# The command sees SHARDSTOCK_TEST_MYSQL (the test user, which may create
# t_* and e2e_* databases), SHARDSTOCK_TEST_MYSQL_APP (the application's
# user), SHARDSTOCK_TEST_ROCKETMQ (the broker's URL with the coordinators'
# ACL credentials), SHARDSTOCK_TEST_ROCKETMQ_PAYMENT (with the payment
# centre's) and the directories the deploy scripts use, so a test can stop
# and restart a service for an outage drill. Redis masters are started by
# each test itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=$root/run/test
mkdir -p "$run"
export SHARDSTOCK_MARIADB_DIR=$run/mariadb SHARDSTOCK_MARIADB_PORT=${SHARDSTOCK_MARIADB_PORT:-3406}
export SHARDSTOCK_RMQ_DIR=$run/rocketmq
export SHARDSTOCK_TEST_REQUIRE_ALL=1

stop() {
  "$root/deploy/rocketmq.sh" stop --wait || true
  "$root/deploy/mariadb.sh" stop || true
}
trap stop EXIT
"$root/deploy/mariadb.sh" start
SHARDSTOCK_TEST_MYSQL=$("$root/deploy/mariadb.sh" test-dsn)
SHARDSTOCK_TEST_MYSQL_APP=$("$root/deploy/mariadb.sh" dsn)
SHARDSTOCK_TEST_MYSQL_CA=$SHARDSTOCK_MARIADB_DIR/tls/ca.crt
export SHARDSTOCK_TEST_MYSQL SHARDSTOCK_TEST_MYSQL_APP SHARDSTOCK_TEST_MYSQL_CA
"$root/deploy/rocketmq.sh" start
SHARDSTOCK_TEST_ROCKETMQ=$("$root/deploy/rocketmq.sh" url coordinator)
SHARDSTOCK_TEST_ROCKETMQ_PAYMENT=$("$root/deploy/rocketmq.sh" url payment)
export SHARDSTOCK_TEST_ROCKETMQ SHARDSTOCK_TEST_ROCKETMQ_PAYMENT
"$@"
