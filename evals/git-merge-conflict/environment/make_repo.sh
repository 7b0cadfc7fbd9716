#!/bin/bash
# Build-time only: main and feature both changed service.ini.
set -euo pipefail
export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.test GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.test
git init -q -b main /app/project && cd /app/project
printf '[service]\nname = inventory\nport = 8000\nworkers = 2\n' > service.ini
echo "print('v1')" > app.py
git add . && git commit -qm "Initial service"
git checkout -qb feature
sed -i 's/name = inventory/name = inventory-api/; s/workers = 2/workers = 4/' service.ini
echo "print('feature')" > feature.py
git add . && git commit -qm "Rename the service, more workers"
git checkout -q main
sed -i 's/port = 8000/port = 9000/; s/workers = 2/workers = 3/' service.ini
git add . && git commit -qm "Move to port 9000"
