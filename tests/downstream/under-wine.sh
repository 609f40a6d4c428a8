#!/usr/bin/env bash
# Runs the downstream crate's Windows build under Wine N times (one process per run, a fresh
# wineserver each), and sums up per case: how the figures in docs/platforms.md were measured.
# A run ended by Wine 8's wineserver assertion (set_fd_events, a Wine bug) is counted apart and
# run again. Usage: tests/downstream/under-wine.sh EXE RUNS BOUND_SECS OUT_DIR
# (WINEPREFIX set up as .ci/run does: the ProcessPrng stand-in in its system32).
set -uo pipefail
exe=$1 runs=$2 bound=$3 out=$4
wine=/usr/lib/wine/wine64
mkdir -p "$out"
crashes=0 run=1
while [ "$run" -le "$runs" ]; do
  timeout 60 wineserver -w >/dev/null 2>&1 || true
  log="$out/run-$run.log"
  rc=0
  timeout 600 "$wine" "$exe" --bound-secs "$bound" >"$log" 2>&1 </dev/null || rc=$?
  if [ "$rc" -ne 0 ] && grep -q 'set_fd_events: Assertion' "$log"; then
    crashes=$((crashes + 1))
    mv "$log" "$out/crash-$crashes.log"
    echo "run $run: wineserver crashed (Wine bug), again"
    continue
  fi
  echo "run $run: exit status $rc"
  run=$((run + 1))
done
echo "== per case, $runs runs (wineserver crashes, run again: $crashes) =="
cat "$out"/run-*.log | sed -n 's/^\(ok\|FAILED\) *\(Emulated\|Native\) \([^ ]* [^ ]* [^ ]*\) (run .*/\1 \3/p' |
  sort | uniq -c | sort -k3,3 -k4,4 -k5,5 -k2,2
