"""The documentation site: `hermetic docs --strict` builds it with MkDocs (a broken link, a missing page
or a broken anchor fails), the generated references cover the code, the site loads nothing from outside,
and `hermetic docs` serves it on loopback. The README stays short and its links land on pages."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hermetic_cli import hermetic

REPO = Path(__file__).resolve().parents[2]
EXTERNAL = re.compile(
    r"""<(?:script|img|iframe)[^>]*\ssrc=["']?(?:https?:)?//|<link[^>]*\shref=["']?(?:https?:)?//"""
)


def _env(root: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return {**clean, "HERMETIC_ROOT": str(root), "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("home")
    out = root / "site"
    done = hermetic("docs", "--no-serve", "--strict", "--site", str(out), env=_env(root), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == str(out)
    return out


def _pages(nav: list[object]) -> Iterator[str]:
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            yield from _pages(value)
        else:
            yield str(value)


def test_every_page_in_the_nav_is_built(site: Path) -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = list(_pages(config["nav"]))
    assert len(pages) > 20
    for page in pages:
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        if page.endswith("/index.md"):
            built = site / page.removesuffix("index.md") / "index.html"
        assert built.is_file(), f"{page} was not built"


def test_the_site_loads_nothing_from_outside(site: Path) -> None:
    for page in site.rglob("*.html"):
        found = EXTERNAL.search(page.read_text())
        assert found is None, f"{page.relative_to(site)} loads {found.group(0)!r}"
    for sheet in site.rglob("*.css"):
        assert not re.search(r"url\(['\"]?(https?:)?//|@import", sheet.read_text()), sheet


def test_the_configuration_reference_names_every_setting(site: Path) -> None:
    from control_plane.config.editor import fields_of
    from control_plane.config.settings import Settings

    page = (site / "reference/configuration/index.html").read_text()
    for section in fields_of(Settings):
        keys = [section, *(fields_of(section.section, section.key + ".") if section.section else [])]
        for f in keys:
            if f.section is None:
                variable = "HERMETIC_" + f.key.upper().replace(".", "__")
                assert f"<code>{variable}</code>" in page, variable
    assert "<code>HERMETIC_SANDBOX__MEMORY</code>" in page and '<code>"1g"</code>' in page


def test_the_cli_and_http_references_cover_the_apps(site: Path) -> None:
    import typer
    import typer.main

    from control_plane.cli.main import app

    sys.path.insert(0, str(REPO / "docs"))
    from refgen.openapi_ref import openapi_schema

    cli = (site / "reference/cli/index.html").read_text()
    root = typer.main.get_command(app)
    for name in root.list_commands(typer.Context(root)):  # type: ignore[attr-defined]
        assert f"<code>hermetic {name}</code>" in cli, name
    assert "<code>hermetic skills install</code>" in cli and "--allow-unverified" in cli
    assert "<code>hermetic docs</code>" in cli
    http = (site / "reference/http-api/index.html").read_text()
    for path in openapi_schema()["paths"]:
        assert f"<code>{path}</code>" in http, path


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    """The same validation settings, on a copy with one page linking to a page that does not exist."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config.pop("hooks")
    config["nav"] = [{"Home": "index.md"}]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")]
    done = subprocess.run([*command, "-d", str(tmp_path / "site")], capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "missing.md" in done.stdout + done.stderr


def test_hermetic_docs_serves_the_built_site_on_loopback(site: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "control_plane", "docs", "--site", str(site), "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[0]  # printed once the socket listens
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "reference/configuration/", timeout=30) as answer:
            assert "HERMETIC_SANDBOX__MEMORY" in answer.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not (tmp_path / "docs-site").exists()  # the fresh site was served, not rebuilt elsewhere


def test_the_readme_is_short_and_links_into_the_docs() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()  # the opening commands
    commands = [line.split("#", 1)[0].strip() for line in block]
    assert commands == ["./setup.sh && .venv/bin/hermetic demo", "./setup.sh && .venv/bin/python -m pytest"]
    assert commands[1] in (REPO / ".ci/run").read_text()  # what CI runs is what the README says
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(links) >= 10
    for link in links:
        assert (REPO / link).is_file(), link
    assert "../shared" not in readme  # nothing outside the repository


def test_hermetic_docs_says_so_when_its_port_is_taken(site: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = hermetic("docs", "--site", str(site), "--port", port, env=_env(tmp_path), timeout=60)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr
