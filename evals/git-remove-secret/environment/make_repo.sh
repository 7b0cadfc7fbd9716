#!/bin/bash
# Build-time only: a repository whose second commit added a credentials file.
set -euo pipefail
export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.test GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.test
git init -q -b main /app/repo && cd /app/repo
echo "# inventory service" > README.md && git add . && GIT_AUTHOR_DATE="2026-01-01T10:00:00Z" GIT_COMMITTER_DATE="2026-01-01T10:00:00Z" git commit -qm "Start the inventory service"
printf 'API_TOKEN=sk-live-7f3a9c21e5\n' > credentials.txt
printf 'def count(items):\n    return len(items)\n' > inventory.py
git add . && GIT_AUTHOR_DATE="2026-01-02T10:00:00Z" GIT_COMMITTER_DATE="2026-01-02T10:00:00Z" git commit -qm "Add counting and local config"
printf 'API_TOKEN=sk-live-7f3a9c21e5\nREGION=eu\n' > credentials.txt
printf 'def count(items):\n    return len(list(items))\n' > inventory.py
git add . && GIT_AUTHOR_DATE="2026-01-03T10:00:00Z" GIT_COMMITTER_DATE="2026-01-03T10:00:00Z" git commit -qm "Count any iterable"
printf '# inventory service\n\nCounts things.\n' > README.md
git add . && GIT_AUTHOR_DATE="2026-01-04T10:00:00Z" GIT_COMMITTER_DATE="2026-01-04T10:00:00Z" git commit -qm "Describe the service"
git gc -q
