"""The server answers on 127.0.0.1:8080 as asked."""

import sys
import urllib.error
import urllib.request


def get(path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:8080{path}", timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError as exc:
        sys.exit(f"nothing answers on 127.0.0.1:8080: {exc}")


for path, want in (("/health", (200, "ok")), ("/sum?a=2&b=3", (200, "5")), ("/sum?a=-7&b=40", (200, "33"))):
    if get(path) != want:
        sys.exit(f"GET {path} gave {get(path)}, not {want}")
if get("/nothing-here")[0] != 404:
    sys.exit("an unknown path does not give 404")
