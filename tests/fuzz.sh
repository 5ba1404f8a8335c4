#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the workspace (every `func Fuzz...` of
# a test file, found by name) for FUZZTIME each, one after another: go test
# fuzzes one target per run. Minimizing a new input is capped at
# FUZZMINIMIZETIME so that a short run keeps fuzzing. A failing input is
# written to the package's testdata/fuzz/<target>/: commit it with the fix,
# and make test runs it from then on (with the seeds). `make fuzz`.
#
# Go before 1.27 can fail a target at the end of -fuzztime with a bare
# "context deadline exceeded" and no failing input: its coordinator's own
# race (golang/go#75804, fixed in Go 1.27), not an input. Such a run is
# run once more; a run that wrote a failing input, or failed any other way,
# fails at once.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

grep -rl --include='*_test.go' --exclude-dir=testdata --exclude-dir=bin --exclude-dir=.sluice '^func Fuzz' . | sort |
	while read -r file; do
		dir=$(dirname "$file")
		for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
			for try in 1 2; do
				echo "fuzz: $dir $target for $FUZZTIME"
				(cd "$dir" && $GO test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" .) 2>&1 | tee "$out"
				[ "${PIPESTATUS[0]}" -eq 0 ] && break
				if [ "$try" -eq 2 ] || grep -q 'Failing input written' "$out" || ! grep -q '^    context deadline exceeded$' "$out"; then
					exit 1
				fi
				echo "fuzz: $target ended at its -fuzztime with Go's own \"context deadline exceeded\" and no failing input (golang/go#75804, fixed in Go 1.27): once more"
			done
		done
	done
