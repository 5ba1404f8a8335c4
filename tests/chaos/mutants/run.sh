#!/usr/bin/env bash
# run.sh measures the chaos suite (tests/chaos) against small bugs put into
# sluice on purpose: for each mutation (a .patch in this directory) it copies
# the tree (without .git) into a temp dir, applies the patch there, builds
# the chaos test binary and runs seeds MUTANT_SEED_BASE.. until the first
# seed whose checker reports a violation (CHAOS FAIL), or MUTANT_SEEDS seeds
# (default 200) pass. It prints which seed caught each mutation and through
# which invariants, then the mutation score. Mutations run one after
# another; the source tree itself is never changed. `make mutants`.
#
#   MUTANT_SEEDS=50 tests/chaos/mutants/run.sh             # every mutation, 50 seeds each at most
#   MUTANTS='01-* 02-*' tests/chaos/mutants/run.sh         # some of them
#   MUTANT_OUT=/tmp/m tests/chaos/mutants/run.sh           # keep the logs there
#   MUTANT_REPLAY=43 MUTANTS=03-* tests/chaos/mutants/run.sh   # run seed 43 ten times on it
#   CHAOS_VIRTUAL=1 tests/chaos/mutants/run.sh             # seeds on virtual time (R3 seeds skipped)
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
dir=$root/tests/chaos/mutants
seeds=${MUTANT_SEEDS:-200}
base=${MUTANT_SEED_BASE:-1}
parallel=${MUTANT_PARALLEL:-2}
out=${MUTANT_OUT:-$(mktemp -d /tmp/sluice-mutants.XXXXXX)}
mkdir -p "$out"
GO=${GO:-go}

cd "$dir"
if [ -n "${MUTANTS:-}" ]; then
	# shellcheck disable=SC2086 # MUTANTS is a list of globs
	patches=$(for g in $MUTANTS; do ls ${g%.patch}.patch 2>/dev/null || true; done)
else
	patches=$(ls ./*.patch)
fi
patches=$(for p in $patches; do basename "$p"; done | sort -u)
[ -n "$patches" ] || { echo "no mutation matches MUTANTS='${MUTANTS:-}' in $dir" >&2; exit 2; }

echo "mutants: $(echo "$patches" | wc -l) mutation(s), seeds $base..$((base + seeds - 1)) each until the first catch, $parallel at a time; logs in $out"
total=0 caught=0
summary=$out/summary.tsv
printf 'mutation\tverdict\tseed\tseeds_run\tinvariants\tseconds\n' >"$summary"
for p in $patches; do
	name=${p%.patch}
	total=$((total + 1))
	tree=$(mktemp -d /tmp/sluice-mutant-tree.XXXXXX)
	(cd "$root" && tar --exclude=./.git --exclude=./bin --exclude=./.sluice -cf - .) | tar -xf - -C "$tree"
	if ! patch -d "$tree" -p1 --quiet --forward <"$dir/$p" >"$out/$name.patch.log" 2>&1; then
		echo "MUTANT $name: the patch does not apply (see $out/$name.patch.log)"
		printf '%s\tno-apply\t\t\t\t\n' "$name" >>"$summary"
		rm -rf "$tree"
		continue
	fi
	bin=$tree/chaos.test
	if ! (cd "$tree" && $GO test -c -o "$bin" ./tests/chaos) >"$out/$name.build.log" 2>&1; then
		echo "MUTANT $name: does not build (see $out/$name.build.log)"
		printf '%s\tno-build\t\t\t\t\n' "$name" >>"$summary"
		rm -rf "$tree"
		continue
	fi
	if [ -n "${MUTANT_REPLAY:-}" ]; then
		# Replay: run seed MUTANT_REPLAY MUTANT_REPLAY_RUNS times (default 10)
		# on this mutation and count the verdicts (docs/chaos.md, "Seeds on virtual time").
		runs=${MUTANT_REPLAY_RUNS:-10} failed=0 verdicts=""
		for i in $(seq 1 "$runs"); do
			log=$out/$name.replay-$MUTANT_REPLAY-$i.log
			(cd "$tree/tests/chaos" && CHAOS_SEED=$MUTANT_REPLAY CHAOS_VIRTUAL=${CHAOS_VIRTUAL:-} exec "$bin" -test.run "TestChaos/seed=$MUTANT_REPLAY\$" -test.v -test.count 1 -test.timeout 10m) >"$log" 2>&1 || true
			v=$(grep -m1 -o 'CHAOS FAIL seed=[0-9]* invariants=[^ ]*' "$log" | sed 's/.*invariants=//' || true)
			[ -n "$v" ] && failed=$((failed + 1))
			verdicts="$verdicts ${v:-pass}"
		done
		echo "REPLAY $name seed $MUTANT_REPLAY: failed $failed of $runs runs:$verdicts"
		rm -rf "$tree"
		continue
	fi
	log=$out/$name.log
	start=$(date +%s)
	pids=()
	if [ "${CHAOS_VIRTUAL:-}" = 1 ]; then
		# On virtual time a process per seed, $parallel at a time (as
		# virtual.sh): a seed whose bubble stands still ends its own
		# process (the watchdog), not every seed after it in a shard. Seeds
		# not yet started are skipped once one caught the mutation.
		export tree bin log
		seq "$base" $((base + seeds - 1)) | xargs -P "$parallel" -I{} sh -c '
			[ -e "$log.caught" ] && exit 0
			cd "$tree/tests/chaos" && CHAOS_VIRTUAL=1 CHAOS_SEED={} "$bin" -test.run "TestChaos/seed={}\$" -test.v -test.count 1 -test.timeout 10m >"$log.s{}" 2>&1
			grep -q "CHAOS FAIL seed=" "$log.s{}" && touch "$log.caught"
			true' &
		pids+=($!)
	else
		(cd "$tree/tests/chaos" && CHAOS_SEEDS=$seeds CHAOS_SEED_BASE=$base exec "$bin" -test.run 'TestChaos$' -test.v \
			-test.count 1 -test.parallel "$parallel" -test.timeout 3h) >"$log.0" 2>&1 &
		pids+=($!)
	fi
	first=
	running() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
	# firstCatch is the lowest seed's verdict among those that failed so far.
	firstCatch() { cat "$log".* 2>/dev/null | grep -o 'CHAOS FAIL seed=[0-9]* invariants=[^ ]*' | sort -t= -k2 -n | head -1 || true; }
	while running; do
		first=$(firstCatch)
		if [ -n "$first" ]; then
			# On virtual time the marker stops new seeds and the ones
			# running end on their own (a killed xargs would leave them).
			[ "${CHAOS_VIRTUAL:-}" = 1 ] || kill "${pids[@]}" 2>/dev/null || true
			break
		fi
		sleep 1
	done
	rc=0
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || rc=$?; done
	if [ "${CHAOS_VIRTUAL:-}" = 1 ]; then
		# A seed process that ended without a verdict (a panic, a
		# timeout) is the binary dying outside any seed's verdict.
		for f in "$log".s*; do
			[ -e "$f" ] || continue
			grep -q -e 'passed in' -e 'CHAOS FAIL seed=' -e 'CHAOS HARNESS FAIL seed=' -e '--- SKIP' "$f" || rc=1
		done
	fi
	first=$(firstCatch)
	cat "$log".* >"$log" 2>/dev/null || true
	rm -f "$log".*
	secs=$(($(date +%s) - start))
	# Parallel subtests print their --- PASS lines only at the end: count
	# the line each passing seed logs as it ends.
	passed=$(grep -c 'chaos_test.go:[0-9]*: seed [0-9]* passed in' "$log" || true)
	harness=$(grep -c 'CHAOS HARNESS FAIL seed=' "$log" || true)
	note=""
	[ "$harness" -gt 0 ] && note=" ($harness harness failure(s), not counted)"
	if [ -n "$first" ]; then
		caught=$((caught + 1))
		seed=${first#CHAOS FAIL seed=}
		seed=${seed%% *}
		inv=${first##*invariants=}
		echo "MUTANT $name: CAUGHT by seed $seed through $inv ($passed seeds passed before; ${secs}s)$note"
		printf '%s\tcaught\t%s\t%s\t%s\t%s\n' "$name" "$seed" "$((passed + 1))" "$inv" "$secs" >>"$summary"
	elif [ "$rc" -ne 0 ] && [ "$harness" -eq 0 ] && [ "$passed" -lt "$seeds" ]; then
		# The binary died outside any seed's verdict (a panic, a timeout): the
		# mutation broke the run, which is a catch, but not an invariant's.
		caught=$((caught + 1))
		echo "MUTANT $name: CAUGHT by a crash after $passed seeds (no checker verdict; see $log)$note"
		printf '%s\tcrash\t\t%s\tcrash\t%s\n' "$name" "$passed" "$secs" >>"$summary"
	else
		echo "MUTANT $name: SURVIVED $passed seeds (${secs}s)$note"
		printf '%s\tsurvived\t\t%s\t\t%s\n' "$name" "$passed" "$secs" >>"$summary"
	fi
	rm -rf "$tree"
done
[ -n "${MUTANT_REPLAY:-}" ] || echo "MUTATION SCORE: $caught of $total caught within $seeds seeds ($((100 * caught / total))%); summary in $summary"
