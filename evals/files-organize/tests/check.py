"""Each original file where the rule puts it, with its content."""

import sys
from pathlib import Path

NAMES = ["report.pdf", "notes.txt", "photo.JPG", "photo2.jpg", "data.csv", "archive.tar.gz", "README",
         "Makefile", "todo.txt", "my song.mp3"]
problems = []
for name in NAMES:
    ext = name.rsplit(".", 1)[1].lower() if "." in name else "other"
    target = Path("/app/sorted") / ext / name
    if not target.is_file() or target.read_text() != f"content of {name}\n":
        problems.append(f"{target} missing or changed")
left = sorted(p.name for p in Path("/app/inbox").iterdir())
if left != [".hidden.txt"]:
    problems.append(f"/app/inbox holds {left}")
if problems:
    sys.exit("; ".join(problems))
