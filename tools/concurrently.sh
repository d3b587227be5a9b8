#!/usr/bin/env bash
# `make test`'s suites at once: each argument is a shell command, run in the background with its
# output kept in a file of its own and printed whole when it ends (the first to end first), so
# that no suite's lines cut into another's. Fails when any failed, after all have ended.
# The suites wait on servers far more than they use a core (a 30 min `make test` used 18 min of
# CPU on 2 cores): running them side by side shortens the run, not the tests.
set -u
logs=$(mktemp -d "${TMPDIR:-/tmp}/seckill-suites.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$logs"' EXIT
trap 'exit 130' INT TERM

count=$#
i=0
for command in "$@"; do
  echo "[suite $i] $command"
  ( bash -c "$command" >"$logs/$i.log" 2>&1; echo $? >"$logs/$i.rc" ) &
  i=$((i + 1))
done
echo "(each suite's output follows when it ends)"

failed=0
shown=0
declare -A done_
while [ "$shown" -lt "$count" ]; do
  wait -n 2>/dev/null || true
  for ((i = 0; i < count; i++)); do
    if [ -z "${done_[$i]:-}" ] && [ -f "$logs/$i.rc" ]; then
      done_[$i]=1
      shown=$((shown + 1))
      rc=$(cat "$logs/$i.rc")
      echo "================ [suite $i] ended with $rc: ${*:$((i + 1)):1}"
      cat "$logs/$i.log"
      [ "$rc" = 0 ] || failed=1
    fi
  done
  # A suite writes its status before it ends: none running and some unshown means killed.
  if [ "$shown" -lt "$count" ] && [ -z "$(jobs -rp)" ]; then
    echo "$((count - shown)) suite(s) ended without a status (killed?)"; exit 1
  fi
done
exit "$failed"
