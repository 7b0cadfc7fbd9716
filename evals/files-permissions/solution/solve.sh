#!/bin/bash
set -euo pipefail
groupadd --system --gid 2000 svc
useradd --system --uid 2000 --gid 2000 --no-create-home svc
chmod 755 /app/deploy/bin/*.sh
chown svc:svc /app/deploy/config/secret.env
chmod 600 /app/deploy/config/secret.env
find /app/deploy/config -type f ! -name secret.env -exec chmod 644 {} +
chown -R svc:svc /app/deploy/logs
chmod 750 /app/deploy/logs
find /app/deploy/logs -type f -exec chmod 750 {} +
