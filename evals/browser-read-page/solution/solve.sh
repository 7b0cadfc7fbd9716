#!/bin/bash
set -euo pipefail
python3 - <<'PY'
from pathlib import Path

from playwright.sync_api import sync_playwright

with sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
    page = browser.new_page()
    page.goto("file:///app/site/index.html")
    text = page.get_by_text("Code:").text_content(timeout=10_000)
    Path("/app/code.txt").write_text(text.split("Code:", 1)[1].strip() + "\n")
    browser.close()
PY
