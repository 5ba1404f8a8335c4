#!/usr/bin/env bash
# virtual.sh runs the chaos suite on virtual time (CHAOS_VIRTUAL=1,
# docs/chaos.md "Seeds on virtual time"): SEEDS seeds from SEED_BASE, split
# over SHARDS processes (default: the machine's cores), since the seeds of one
# process run one at a time. It prints every failing seed's block, then one
# summary line: seeds run, passed, failed, skipped (R3 clusters run on real
# time only), wall time and seeds per minute. Exit 1 if a seed failed.
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
echo "chaos on virtual time: seeds $base..$((base + seeds - 1)) in $shards process(es); logs in $out"
start=$(date +%s)
pids=()
for i in $(seq 0 $((shards - 1))); do
	(cd tests/chaos && CHAOS_VIRTUAL=1 CHAOS_SEEDS=$seeds CHAOS_SEED_BASE=$base CHAOS_SHARD=$i/$shards \
		exec "$out/chaos.test" -test.run 'TestChaos$' -test.v -test.count 1 -test.timeout 3h) >"$out/shard-$i.log" 2>&1 &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
secs=$(($(date +%s) - start))
passed=$(cat "$out"/shard-*.log | grep -c 'chaos_test.go:[0-9]*: seed [0-9]* passed in' || true)
skipped=$(cat "$out"/shard-*.log | grep -c -- '--- SKIP: TestChaos/seed=' || true)
failed=$(cat "$out"/shard-*.log | grep -c 'CHAOS \(HARNESS \)\?FAIL seed=[0-9]* \(invariants\|(the harness\)' || true)
# Every failing seed's block, as the real-time suite prints it.
for f in "$out"/shard-*.log; do
	awk '/CHAOS (HARNESS )?FAIL seed=/{p=1} /^=== RUN|^--- (PASS|FAIL|SKIP)/{p=0} p' "$f"
	grep -E '^(panic|fatal error):|CHAOS HARNESS FAIL seed=[0-9]*: still running' "$f" || true
done
ran=$((passed + failed))
per=0
[ "$secs" -gt 0 ] && per=$((ran * 60 / secs))
echo "CHAOS VIRTUAL: $ran seeds ran ($passed passed, $failed failed), $skipped skipped (R3 clusters: real time only), in ${secs}s ($per seeds a minute, $shards processes)"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
	echo "a shard failed outside any seed's verdict: see $out/shard-*.log"
fi
exit $rc
