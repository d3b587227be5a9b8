#!/usr/bin/env bash
# A local Redis Cluster of 3 masters and 3 replicas, each with the module loaded:
#   tools/cluster.sh start | stop | status
# Ports CLUSTER_PORT .. CLUSTER_PORT+5 (default 7000), data in CLUSTER_DIR (default .cluster).
set -euo pipefail

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
BASE=${CLUSTER_PORT:-7000}
DIR=${CLUSTER_DIR:-$(pwd)/.cluster}
MODULE=${MODULE:-$(pwd)/target/release/libseckill.so}
PORTS=$(seq "$BASE" $((BASE + 5)))

start() {
  [ -f "$MODULE" ] || { echo "$MODULE is missing: run make build"; exit 1; }
  for port in $PORTS; do
    if "$REDIS_CLI" -p "$port" ping >/dev/null 2>&1; then
      echo "port $port is in use: make cluster-stop, or pick CLUSTER_PORT=..."; exit 1
    fi
  done
  for port in $PORTS; do
    mkdir -p "$DIR/$port"
    # A fresh cluster each time: a node's old nodes.conf would name peers that are gone.
    rm -f "$DIR/$port"/nodes.conf "$DIR/$port"/dump.rdb
    rm -rf "$DIR/$port"/appendonlydir
    "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --dir "$DIR/$port" --daemonize yes \
      --pidfile "$DIR/$port/redis.pid" --logfile "$DIR/$port/redis.log" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
      --appendonly yes --loadmodule "$MODULE"
  done
  for port in $PORTS; do
    for _ in $(seq 100); do "$REDIS_CLI" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  # shellcheck disable=SC2046
  "$REDIS_CLI" --cluster create $(for port in $PORTS; do echo "127.0.0.1:$port"; done) \
    --cluster-replicas 1 --cluster-yes >"$DIR/create.log"
  for port in $PORTS; do
    for _ in $(seq 300); do
      "$REDIS_CLI" -p "$port" cluster info 2>/dev/null | grep -q cluster_state:ok && break
      sleep 0.1
    done
  done
  # Up means every replica in sync: a sale made before would wait in vain for one to
  # acknowledge it (a handle's default durability), and be NotReplicated.
  for port in $PORTS; do
    for _ in $(seq 300); do
      info=$("$REDIS_CLI" -p "$port" info replication 2>/dev/null || true)
      if echo "$info" | grep -q role:master || echo "$info" | grep -q master_link_status:up; then break; fi
      sleep 0.1
    done
  done
  echo "cluster up: 3 masters, 3 replicas on 127.0.0.1:$BASE-$((BASE + 5)), data in $DIR"
  echo "try: $REDIS_CLI -c -p $BASE cluster nodes    stop: make cluster-stop"
}

# Stops the nodes started from DIR, whatever CLUSTER_PORT they were given (each node's folder
# is named by its port); the ports of CLUSTER_PORT too, for a DIR that is gone.
stop() {
  local ports="$PORTS" stopped=""
  for pidfile in "$DIR"/*/redis.pid; do
    [ -f "$pidfile" ] && ports="$ports $(basename "$(dirname "$pidfile")")"
  done
  for port in $(echo "$ports" | tr ' ' '\n' | sort -un); do
    if "$REDIS_CLI" -p "$port" shutdown nosave >/dev/null 2>&1; then stopped="$stopped $port"; fi
  done
  echo "cluster stopped (ports:${stopped:- none running})"
}

status() {
  "$REDIS_CLI" --cluster check "127.0.0.1:$BASE"
}

"${1:-start}"
