#!/bin/bash
set -euo pipefail
groupadd --system --gid 1500 notes
useradd --system --uid 1500 --gid 1500 --no-create-home --shell /usr/sbin/nologin notes
install -D -o root -g root -m 755 /app/notes/notes_app.py /opt/notes/notes_app.py
install -d -o notes -g notes -m 700 /var/lib/notes
mkdir -p /etc/notes
token=$(tr -d '[:space:]' < /app/notes/token.txt)
printf '[server]\nport = 9090\ntoken = %s\ndata_dir = /var/lib/notes\n' "$token" > /etc/notes/notes.conf
chown root:notes /etc/notes/notes.conf
chmod 640 /etc/notes/notes.conf
install -o notes -g notes -m 640 /dev/null /var/log/notes.log
setsid nohup runuser -u notes -- python3 /opt/notes/notes_app.py >> /var/log/notes.log 2>&1 < /dev/null &
for _ in $(seq 50); do
  curl -s -o /dev/null http://127.0.0.1:9090/notes && break
  sleep 0.1
done
curl -sSf -X POST -H "Authorization: Bearer $token" --data-binary 'first note' http://127.0.0.1:9090/notes
