#!/bin/bash
set -euo pipefail
cd /app/repo
export FILTER_BRANCH_SQUELCH_WARNING=1
git filter-branch -f --index-filter 'git rm -q --cached --ignore-unmatch credentials.txt' -- --all
git for-each-ref --format='%(refname)' refs/original/ | xargs -r -n1 git update-ref -d
git reflog expire --expire=now --all
git gc -q --prune=now
