#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each and reports every
# failure. Every target runs even after one fails, so one crasher does not
# hide the rest; the summary lists the failures, whose inputs go test has
# saved in the package's testdata/fuzz/<Target>/ (commit them: they are then
# regression cases that plain go test runs). Targets are found by grep, not
# by go test -list, which would build every package's test binary.
#
# A target that fails with only "context deadline exceeded" and no failing
# input runs again, up to three tries: that is the fuzzing engine's
# coordinator losing a race with its own -fuzztime deadline while a worker
# is busy, not a finding. On a loaded 2-core machine about one target in
# twenty hits it at 2 s, so with two tries a run of the forty-odd targets
# failed about one time in ten for no input at all; a third such failure
# in a row is reported.
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
cd "$(dirname "$0")/.."

out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=()
for f in $(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -l '^func Fuzz'); do
	pkg=./$(dirname "$f")
	for t in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		for try in 1 2 3; do
			echo "== $pkg $t"
			if "$GO" test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$out"; then
				break
			fi
			if [ "$try" -lt 3 ] && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
				echo "== $pkg $t: engine deadline race, no failing input: running it again"
				continue
			fi
			failed+=("$pkg $t")
			break
		done
	done
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: ${#failed[@]} target(s) failed (inputs saved under testdata/fuzz/):"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "fuzz: every target passed"
