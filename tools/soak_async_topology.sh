#!/usr/bin/env bash
# make soak: each async topology case of tests/cluster.rs RUNS times in a row (20 unless
# set), every run bounded (a hang fails the run at BOUND_S seconds); prints each run's time
# and the slowest per case. Fails on the first failed or hung run.
set -euo pipefail
runs=${RUNS:-20}
bound=${BOUND_S:-300}
binary=$(cargo test --release --test cluster --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*cluster-[^"]*"' | head -1 | cut -d'"' -f4)
[ -x "$binary" ] || { echo "no test binary for tests/cluster.rs"; exit 1; }
for case in sells_out_exactly_through_a_cluster_failover_async \
            sells_out_exactly_while_two_masters_join_and_the_cluster_rebalances_async \
            sells_out_exactly_through_a_killed_master_async; do
  slowest=0
  for run in $(seq "$runs"); do
    started=$(date +%s.%N)
    if ! timeout "$bound" "$binary" --exact "$case" --test-threads 1 >/tmp/soak-async.log 2>&1; then
      cat /tmp/soak-async.log
      echo "$case: run $run of $runs failed or passed ${bound} s"
      exit 1
    fi
    took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    echo "$case: run $run of $runs, ${took} s"
    slowest=$(awk -v a="$took" -v b="$slowest" 'BEGIN { print (a > b ? a : b) }')
  done
  echo "$case: $runs of $runs passed, slowest ${slowest} s"
done
