#!/usr/bin/env bash
# hack/suite-exit.sh TARGET [VAR=value...]: run `make TARGET` (conformance
# or nightly) and exit with the suite's own code, which make cannot return:
# it turns every failed recipe into 2. The target writes the code to
# SUITE_EXIT_FILE and succeeds; this script exits with it.
#   conformance: 0 passed, 1 failed, 3 partial
#   nightly:     0 nothing regressed (or the first night recorded the
#                baseline), 1 a regression or a failed run, 2 cannot
#                compare, 3 partial
# When make fails before the suite runs (a build error) it exits 1 and
# says so: the night failed, it did not merely decide nothing.
set -uo pipefail
if (( $# == 0 )); then
	echo "usage: hack/suite-exit.sh conformance|nightly [VAR=value...]" >&2
	exit 2
fi
code_file=$(mktemp)
trap 'rm -f "$code_file"' EXIT
"${MAKE:-make}" "$@" SUITE_EXIT_FILE="$code_file"
rc=$?
if [[ -s $code_file ]]; then
	exit "$(<"$code_file")"
fi
if (( rc != 0 )); then
	echo "suite-exit: make $* exited $rc before the suite ran" >&2
	exit 1
fi
echo "suite-exit: make $* ran no suite that reports its exit code" >&2
exit 1
