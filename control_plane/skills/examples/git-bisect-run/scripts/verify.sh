#!/usr/bin/env bash
# Build a repository whose 7th commit breaks add(), and check that bisect.sh names that commit.
set -euo pipefail
script=$PWD/scripts/bisect.sh
repo=$(mktemp -d)
trap 'rm -r -- "$repo"' EXIT
cd "$repo"
git init --quiet --initial-branch=main
git config user.email check@example.invalid
git config user.name check
for i in $(seq 1 12); do
    if [[ $i -lt 7 ]]; then op="+"; else op="-"; fi
    printf 'def add(a, b):\n    return a %s b\n# revision %s\n' "$op" "$i" > calc.py
    git add calc.py
    git commit --quiet -m "revision $i"
done
expected=$(git log --format=%H --grep='^revision 7$')
output=$(bash "$script" HEAD~11 'python3 -B -c "import calc; assert calc.add(2, 3) == 5"')
echo "$output"
[[ $output == "first bad commit: $expected revision 7" ]]
[[ $(git symbolic-ref --short HEAD) == main ]]
# a wrong premise is refused: the test already fails at the "good" commit
if bash "$script" HEAD~2 'python3 -B -c "import calc; assert calc.add(2, 3) == 5"' 2>/dev/null; then
    echo "bisect.sh accepted a good commit that fails" >&2
    exit 1
fi
echo "git-bisect-run: ok"
