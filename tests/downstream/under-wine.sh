#!/usr/bin/env bash
# Runs the downstream crate's Windows build under Wine: every case RUNS times, each case run in a
# process of its own, and sums up per case. `.ci/run` calls it with RUNS=1; the figures in
# docs/platforms.md are RUNS=10.
#
# Usage: tests/downstream/under-wine.sh EXE RUNS BOUND_SECS OUT_DIR
# (WINEPREFIX set up as .ci/run does it: the ProcessPrng stand-in in its system32.)
#
# Wine 8's wineserver sometimes fails an assertion (`set_fd_events`, a Wine bug) when threads
# poll sockets while another closes one, which is what these cases do: the server dies and the
# program waits for it for ever. So the server runs here in the foreground with its own log, a
# case whose server died is stopped at once and run again (3 attempts at most), and every crash
# is counted and shown. A case that fails or hangs while the server lives is never run again.
# A case killed by a signal (SIGKILL or SIGSEGV, status 137 or 139) while Wine ends the process,
# after it printed a passing verdict, counts as passed and is counted and shown apart.
# Exit status 1 if any case failed.
set -uo pipefail
exe=$1 runs=$2 bound=$3 out=$4
wine=${WINE:-/usr/lib/wine/wine64}
mkdir -p "$out"
: >"$out/wineserver.log"
server=

# Processes a dead server left behind (its device services), ended by their ids: only those of
# this Wine prefix.
reap_orphans() {
  local p
  for p in $(pgrep -f 'winedevice\.exe|services\.exe|plugplay\.exe|explorer\.exe' || true); do
    if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qxF "WINEPREFIX=$WINEPREFIX"; then
      kill -9 "$p" 2>/dev/null || true
    fi
  done
}

start_server() {
  timeout 60 wineserver -k >/dev/null 2>&1 || true
  reap_orphans
  wineserver -f -p >>"$out/wineserver.log" 2>&1 &
  server=$!
  sleep 1
}

server_died() { ! kill -0 "$server" 2>/dev/null; }

start_server
crashes=0 failed=0 killed_at_exit=0
: >"$out/results"
for run in $(seq "$runs"); do
  for variant in other-drops member-drops member-deletes; do
    for proto in udp tcp; do
      for interest in plain exclusive; do
        log="$out/$variant-$proto-$interest-$run.log"
        for attempt in 1 2 3; do
          server_died && start_server
          timeout 120 "$wine" "$exe" --only "$variant" --proto "$proto" --interest "$interest" \
            --bound-secs "$bound" >"$log" 2>&1 </dev/null &
          pid=$!
          while kill -0 "$pid" 2>/dev/null; do
            if server_died; then
              kill "$pid" 2>/dev/null
              break
            fi
            sleep 0.2
          done
          rc=0
          wait "$pid" || rc=$?
          if [ "$rc" -ne 0 ] && server_died; then
            crashes=$((crashes + 1))
            echo "wineserver died during $variant $proto $interest (run $run, attempt $attempt):" \
              "$(grep Assertion "$out/wineserver.log" | tail -n 1 || true)"
            cp "$log" "$out/crash-$crashes.log"
            rc=125
            continue
          fi
          # Killed by a signal while exiting (SIGKILL, status 137: seen 2 times in 120 runs;
          # SIGSEGV, 139: once in CI), after the program printed a passing verdict and called
          # `exit(0)`: the cases passed, the crash is in Wine's process exit.
          if { [ "$rc" -eq 137 ] || [ "$rc" -eq 139 ]; } &&
            [ "$(tail -n 1 "$log")" = "every case passed" ]; then
            killed_at_exit=$((killed_at_exit + 1))
            echo "killed by Wine at exit (status $rc), after its verdict: $variant $proto" \
              "$interest (run $run)"
            rc=0
          fi
          break
        done
        grep -h '^ok\|^FAILED' "$log" | tee -a "$out/results"
        if [ "$rc" -ne 0 ]; then
          failed=1
          echo "FAILED  $variant $proto $interest (run $run): exit status $rc" | tee -a "$out/results"
          cat "$log"
        fi
      done
    done
  done
done
timeout 60 wineserver -k >/dev/null 2>&1 || true
reap_orphans
echo "== per case: passed runs of $runs (wineserver crashes, the case run again: $crashes;" \
  "killed by Wine at exit after passing: $killed_at_exit) =="
sed -n 's/^ok *[A-Za-z]* \([^ ]* [^ ]* [^ ]*\) (run .*/\1/p' "$out/results" | sort | uniq -c
if [ "$failed" -ne 0 ]; then
  echo "some cases FAILED (see above)"
  exit 1
fi
echo "every case passed"
