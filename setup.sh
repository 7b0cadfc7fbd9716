#!/usr/bin/env bash
# Sets up Hermetic on Debian/Ubuntu: system packages, a running dockerd, a virtualenv in .venv,
# and the sandbox image (built offline, cached by content hash). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

PACKAGES="docker.io docker-compose haproxy bubblewrap debootstrap ripgrep python3 python3-venv git ca-certificates procps openssh-server openssh-client chromium fonts-liberation libatomic1 postgresql iproute2 curl python3-pip python3-ipykernel ngircd prosody postfix dovecot-imapd dovecot-lmtpd"
missing=""
for pkg in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
# node and npm (an MCP reference server in the tests): Debian's, unless a node with its own npm is there
# (NodeSource's nodejs ships npm and conflicts with Debian's npm package)
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  # Postfix asks what kind of mail system this is: none (the tests run instances of their own)
  echo "postfix postfix/main_mailer_type select No configuration" | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# ngircd, prosody, postfix and dovecot are for the tests, which start their own on loopback: Debian's
# services (all interfaces, the standard ports) stay off, under systemd or an init script
for service in ngircd prosody postfix dovecot; do
  if [ -d /run/systemd/system ]; then
    if systemctl is-enabled $service >/dev/null 2>&1; then
      $SUDO systemctl disable --now $service >/dev/null 2>&1 || true
    fi
  elif [ -x /etc/init.d/$service ] && $SUDO /etc/init.d/$service status >/dev/null 2>&1; then
    $SUDO /etc/init.d/$service stop >/dev/null 2>&1 || true
  fi
done

# File watching takes an inotify instance per watch, counted per user across every sandbox (they run
# as this user): Debian's default of 128 instances is too few for a host running many sandboxes (and the
# test suite ran out of it). Raised, never lowered.
if [ "$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)" -lt 1024 ]; then
  $SUDO sysctl -q -w fs.inotify.max_user_instances=1024 >/dev/null 2>&1 \
    || echo "setup: could not raise fs.inotify.max_user_instances (file watching may run out)" >&2
fi

if ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd"
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl start docker
  else
    $SUDO sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'
  fi
  for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "setup: dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi

# The virtualenv is reinstalled only when pyproject.toml changed.
stamp=".venv/.hermetic-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python dependencies into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  echo "$want" > "$stamp"
fi

# Playwright for the host's python3, where SSH sandboxes on this host (and the tests) find it.
site=/opt/hermetic/site
version=$(.venv/bin/python -c "from importlib.metadata import version; print(version('playwright'))")
if [ "$(cat "$site/.playwright-version" 2>/dev/null)" != "$version" ]; then
  echo "setup: installing Playwright $version into $site"
  $SUDO .venv/bin/pip install -q --upgrade --target "$site" "playwright==$version"
  echo "$version" | $SUDO tee "$site/.playwright-version" >/dev/null
fi

# Synapse (a Matrix homeserver) for the Matrix tests, which start their own on loopback: from PyPI into a
# virtualenv of its own (its pins would fight the project's), kept while it imports.
synapse=/opt/synapse-venv
if ! "$synapse/bin/python" -c "import synapse" >/dev/null 2>&1; then
  echo "setup: installing Synapse into $synapse"
  $SUDO python3 -m venv "$synapse"
  $SUDO "$synapse/bin/pip" install -q "matrix-synapse>=1.100"
fi

for variant in slim browser node; do  # node: MCP servers from npm (hermetic mcp add --npm)
  echo "setup: sandbox image $(.venv/bin/python -m images.build --variant "$variant")"
done
if [ "${HERMETIC_SETUP_SERVICE_IMAGES:-}" = 1 ]; then  # .ci/run: the compose stack's images, for its test
  .venv/bin/python -m images.services | sed 's/^/setup: service image /'
fi
