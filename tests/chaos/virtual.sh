#!/usr/bin/env bash
# virtual.sh runs the chaos suite on virtual time (CHAOS_VIRTUAL=1,
# docs/chaos.md "Seeds on virtual time"): SEEDS seeds from SEED_BASE, each
# in a process of its own, SHARDS (default: the machine's cores) at a time.
# A seed whose bubble stands still (a goroutine waiting on a lock across a
# wait virtual time cannot see; the watchdog ends it after a while of real
# time) is run again on real time, so that it is still judged. It prints
# every failing seed's block, then one summary line: seeds run, passed,
# failed, skipped (R3 clusters run on real time only), rerun on real time,
# wall time and seeds per minute. Exit 1 if a seed failed.
# `make chaos-virtual`, `make chaos-long`.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seeds=${SEEDS:-200}
base=${SEED_BASE:-1}
shards=${SHARDS:-$(nproc)}
out=${CHAOS_OUT:-$(mktemp -d /tmp/sluice-chaos-virtual.XXXXXX)}
mkdir -p "$out"
GO=${GO:-go}
cd "$root"
$GO test -c -o "$out/chaos.test" ./tests/chaos || exit 2
echo "chaos on virtual time: seeds $base..$((base + seeds - 1)), $shards at a time, a process each; logs in $out"
start=$(date +%s)
export out
seq "$base" $((base + seeds - 1)) | xargs -P "$shards" -I{} sh -c '
	cd tests/chaos
	CHAOS_VIRTUAL=1 CHAOS_SEED={} "$out/chaos.test" -test.run "TestChaos/seed={}\$" -test.v -test.count 1 -test.timeout 10m >"$out/seed-{}.log" 2>&1
	if grep -q "CHAOS HARNESS FAIL seed={}: still running" "$out/seed-{}.log"; then
		# The bubble stood still: judge the seed on real time instead.
		CHAOS_SEED={} "$out/chaos.test" -test.run "TestChaos/seed={}\$" -test.v -test.count 1 -test.timeout 10m >"$out/seed-{}.real.log" 2>&1
	fi
	true'
secs=$(($(date +%s) - start))
verdicts() { for f in "$out"/seed-*.log; do
	case $f in *.real.log) continue ;; esac
	r=${f%.log}.real.log
	[ -f "$r" ] && f=$r
	cat "$f"
done; }
passed=$(verdicts | grep -c 'chaos_test.go:[0-9]*: seed [0-9]* passed in' || true)
skipped=$(verdicts | grep -c -- '--- SKIP: TestChaos/seed=' || true)
failed=$(verdicts | grep -c 'CHAOS \(HARNESS \)\?FAIL seed=[0-9]* \(invariants\|(the harness\)' || true)
real=$(ls "$out"/seed-*.real.log 2>/dev/null | wc -l)
other=$(verdicts | grep -c -E '^(panic|fatal error):' || true)
verdicts | awk '/CHAOS (HARNESS )?FAIL seed=[0-9]* (invariants|\(the harness)/{p=1} /^=== RUN|^--- (PASS|FAIL|SKIP)|^(PASS|FAIL)$/{p=0} p'
verdicts | grep -E -A20 '^(panic|fatal error):' || true
ran=$((passed + failed))
per=0
[ "$secs" -gt 0 ] && per=$((ran * 60 / secs))
echo "CHAOS VIRTUAL: $ran seeds ran ($passed passed, $failed failed; $real stood still on virtual time and were judged on real time), $skipped skipped (R3 clusters: real time only), in ${secs}s ($per seeds a minute, $shards at a time)"
[ "$failed" -eq 0 ] && [ "$other" -eq 0 ] && [ $((ran + skipped)) -eq "$seeds" ] || exit 1
