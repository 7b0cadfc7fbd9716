"""The renamed set, each file with its original content."""

import sys
from pathlib import Path

expected = {
    "2024-01-31_10-15-00.jpg": "IMG_20240131_101500.jpg",
    "2023-12-24_23-59-59.jpg": "IMG_20231224_235959.jpg",
    "2024-07-01_08-00-01.jpg": "IMG_20240701_080001.jpg",
    "IMG_20240301_120000 (1).jpg": "IMG_20240301_120000 (1).jpg",
    "notes.txt": "notes.txt",
    "IMG_2024.jpg": "IMG_2024.jpg",
}
found = {p.name: p.read_text().strip() for p in Path("/app/photos").iterdir()}
if found != expected:
    sys.exit(f"expected {expected}, found {found}")
