#!/bin/sh
# The web console's front-end dependencies (xterm.js for the sandbox terminal), from npm by the lock file,
# copied as built files into the package data (the wheel works offline; nothing is built at install).
# Two documented patches make xterm 6 work under the console's strict style-src 'self' (xterm.js #4445):
# its computed styles go into <hermetic-style> elements, which the console adopts as constructed style
# sheets (CSSOM, which CSP allows), instead of <style> elements; and a cell's own colours are set through
# el.style.cssText instead of setAttribute("style"). The script stops if either patch no longer applies.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../control_plane/api/console_static/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$work/"
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund >/dev/null)
mods="$work/node_modules/@xterm"
patch() {  # file, literal text, replacement, expected count
  n=$(grep -o -F "$2" "$1" | wc -l)
  [ "$n" -eq "$4" ] || { echo "vendor.sh: expected $4 of '$2' in $1, found $n" >&2; exit 1; }
  python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path, encoding="utf-8").read()
open(path, "w", encoding="utf-8").write(text.replace(old, new))
PY
}
mkdir -p "$out"
grep -v '^//# sourceMappingURL=' "$mods/xterm/lib/xterm.mjs" >"$out/xterm.js"
grep -v '^//# sourceMappingURL=' "$mods/addon-fit/lib/addon-fit.mjs" >"$out/addon-fit.js"
patch "$out/xterm.js" 'createElement("style")' 'createElement("hermetic-style")' 3
patch "$out/xterm.js" 't.setAttribute("style",`${t.getAttribute("style")||""}${e};`)' 't.style.cssText+=`${e};`' 1
cp "$mods/xterm/css/xterm.css" "$out/xterm.css"
cp "$mods/xterm/LICENSE" "$out/LICENSE.xterm"
cp "$mods/addon-fit/LICENSE" "$out/LICENSE.addon-fit"
cp "$here/package-lock.json" "$out/package-lock.json"
