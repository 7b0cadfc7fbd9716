#!/usr/bin/env bash
# Usage: bisect.sh GOOD_REF "TEST COMMAND" [BAD_REF] - print the first commit where TEST COMMAND fails.
set -uo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: bisect.sh GOOD_REF \"TEST COMMAND\" [BAD_REF]" >&2
    exit 2
fi
good=$1 test_command=$2 bad=${3:-HEAD}
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
    echo "error: uncommitted changes; commit or stash them first" >&2
    exit 2
fi
start=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
good=$(git rev-parse --verify "$good^{commit}") && bad=$(git rev-parse --verify "$bad^{commit}") || exit 2
check() {  # check REF: run the test at REF, print its exit code
    git checkout --quiet "$1" && (bash -c "$test_command" >/dev/null 2>&1; echo $?)
}
good_rc=$(check "$good")
bad_rc=$(check "$bad")
git checkout --quiet "$start"
if [[ $good_rc -ne 0 ]]; then
    echo "error: the test fails at the good commit $good (exit $good_rc); pick an older good commit" >&2
    exit 1
fi
if [[ $bad_rc -eq 0 ]]; then
    echo "error: the test passes at $bad; there is no regression to find" >&2
    exit 1
fi
git bisect start "$bad" "$good" >/dev/null
git bisect run bash -c "$test_command" > .git/bisect-run.log 2>&1
first=$(git rev-parse --verify --quiet refs/bisect/bad)
git bisect reset "$start" >/dev/null 2>&1
if [[ -z $first ]]; then
    echo "error: bisect did not finish; see .git/bisect-run.log" >&2
    exit 1
fi
echo "first bad commit: $(git log -1 --format='%H %s' "$first")"
