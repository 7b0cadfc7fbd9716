#!/bin/bash
set -euo pipefail
cd /app/project
git checkout -q main
git -c user.name=Agent -c user.email=agent@example.test merge feature -m "Merge feature" || true
printf '[service]\nname = inventory-api\nport = 9000\nworkers = 4\n' > service.ini
git add service.ini
git -c user.name=Agent -c user.email=agent@example.test commit -qm "Merge feature into main"
