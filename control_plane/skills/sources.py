"""Fetching skills from outside onto the host: a directory, a .tar.gz/.zip file or URL, a git repository.

Nothing fetched is executed here: this module only copies, downloads and unpacks, within limits (bytes,
file count), refusing links that leave the tree, device files and paths that escape. A git clone is
measured once it is on disk (git cannot be told to stop at a size), bounded meanwhile by GIT_TIMEOUT.
Git runs as a subprocess with hooks, submodules, prompts and every transport but file/http(s)/ssh/git
turned off.

A source is written `LOCATION[#REF][:SUBDIR]`: `#REF` (a branch, tag or commit) for git, `:SUBDIR` the
directory inside the source that holds the skill(s). For a URL the `:SUBDIR` needs the `#` before it
(`https://host/repo.git#main:skills/pdf`, or `#:skills/pdf` for the default branch).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from .format import SKILL_FILE
from .reach import opener, pinned_git

Kind = Literal["dir", "archive", "git"]
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
GIT_TIMEOUT = 120.0
HTTP_TIMEOUT = 30.0
SEARCH_DEPTH = 4
"""How deep below the source's root SKILL.md files are looked for."""


class SourceError(ValueError):
    """A source that cannot be fetched or is refused (over a limit, a link out, a device file...)."""


@dataclass(frozen=True)
class Limits:
    """What a fetch may bring in, and where it may connect."""

    max_bytes: int = 50 * 1024 * 1024
    """Bytes a download, an archive's contents or a copied tree may hold."""
    max_files: int = 5_000
    """Entries an archive or tree may hold."""
    public_only: bool = False
    """Connect to public addresses only (reach.py): what the HTTP API's fetches do unless
    skill_install.allow_private_urls."""


@dataclass(frozen=True)
class Source:
    location: str
    ref: str | None = None
    subdir: str | None = None

    @property
    def kind(self) -> Kind:
        lower = self.location.lower().split("?")[0]
        if lower.endswith(ARCHIVE_SUFFIXES):
            return "archive"
        if _is_url(self.location) or self.location.startswith("git@"):
            return "git"
        path = Path(self.location)
        if (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir()):
            return "git"
        return "dir"

    def __str__(self) -> str:
        if not self.ref and not self.subdir:
            return self.location
        return f"{self.location}#{self.ref or ''}" + (f":{self.subdir}" if self.subdir else "")


def parse_source(text: str) -> Source:
    """`LOCATION[#REF][:SUBDIR]` as a Source (local paths are made absolute)."""
    location, ref, subdir = text.strip(), None, None
    if "#" in location:
        location, rest = location.split("#", 1)
        ref, _, subdir = rest.partition(":")
    elif not _is_url(location) and ":" in location and not Path(location).exists():
        head, _, tail = location.rpartition(":")
        if Path(head).exists():
            location, subdir = head, tail
    if not location:
        raise SourceError(f"{text!r}: no location before '#'")
    if not _is_url(location) and not location.startswith("git@"):
        path = Path(location).expanduser()
        if not path.exists():
            raise SourceError(f"{location}: no such file or directory")
        location = str(path.resolve())
    if subdir:
        parts = PurePosixPath(subdir).parts
        if PurePosixPath(subdir).is_absolute() or ".." in parts:
            raise SourceError(f"subdirectory {subdir!r} must be a relative path inside the source")
    return Source(location, ref or None, subdir.strip("/") or None if subdir else None)


@dataclass
class Fetched:
    root: Path
    """The tree the source resolved to (its SUBDIR applied)."""
    commit: str | None = None
    """For git: the commit checked out."""


def fetch(source: Source, into: Path, limits: Limits) -> Fetched:
    """Copy, download and unpack, or clone `source` under the empty directory `into`."""
    if source.ref and source.kind != "git":
        raise SourceError(f"{source}: a #REF applies to git repositories only")
    tree, commit = into / _base_name(source.location), None
    match source.kind:
        case "git":
            commit = _clone(source, tree, limits)
        case "archive":
            unpack(_read_archive(source.location, limits), source.location, tree, limits)
        case "dir":
            copy_tree(Path(source.location), tree, limits)
    root = tree / source.subdir if source.subdir else tree
    if not root.resolve().is_relative_to(tree.resolve()) or not root.is_dir():
        raise SourceError(f"{source}: there is no directory {source.subdir!r} in the source")
    check_tree(tree, limits)
    return Fetched(root, commit)


def find_skills(root: Path) -> list[Path]:
    """The skill directories in a fetched tree: the root itself, or every directory below holding SKILL.md."""
    if (root / SKILL_FILE).is_file():
        return [root]
    found = []
    for directory, dirs, files in os.walk(root):
        depth = len(Path(directory).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if d != ".git" and depth < SEARCH_DEPTH)  # .claude/skills counts
        if SKILL_FILE in files and Path(directory) != root:
            found.append(Path(directory))
            dirs[:] = []  # a skill's own subdirectories hold its files, not more skills
    return sorted(found)


# -- limits on a tree ---------------------------------------------------------------------------


def check_tree(tree: Path, limits: Limits) -> None:
    """Refuse a tree with too many entries or bytes, a device/FIFO/socket, or a link leaving it."""
    root = tree.resolve()
    count = total = 0
    for directory, dirs, files in os.walk(tree):
        if ".git" in dirs and Path(directory) == tree:
            dirs.remove(".git")
        for entry in dirs + files:
            path = Path(directory, entry)
            rel = path.relative_to(tree).as_posix()
            count += 1
            if count > limits.max_files:
                raise SourceError(f"the source has more than {limits.max_files:,} files")
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                target = (path.parent / os.readlink(path)).resolve()
                if not target.is_relative_to(root):
                    raise SourceError(f"{rel} is a link leaving the source (to {os.readlink(path)})")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise SourceError(f"{rel} is a device, FIFO or socket; a skill holds regular files only")
            else:
                total += path.lstat().st_size if stat.S_ISREG(mode) else 0
                if total > limits.max_bytes:
                    raise SourceError(f"the source holds more than {limits.max_bytes:,} bytes")


def copy_tree(source: Path, target: Path, limits: Limits) -> None:
    """Copy a local directory, links as links (checked by check_tree, never followed)."""
    if not source.is_dir():
        raise SourceError(f"{source}: not a directory")
    check_tree(source, limits)
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns(".git"))


# -- archives -----------------------------------------------------------------------------------


def _read_archive(location: str, limits: Limits) -> bytes:
    if not _is_url(location):
        size = Path(location).stat().st_size
        if size > limits.max_bytes:
            raise SourceError(f"{location} is {size:,} bytes; at most {limits.max_bytes:,}")
        return Path(location).read_bytes()
    if urllib.parse.urlsplit(location).scheme not in ("http", "https"):
        raise SourceError(f"{location}: only http and https URLs are fetched")
    try:
        with opener(limits.public_only).open(location, timeout=HTTP_TIMEOUT) as response:
            data = response.read(limits.max_bytes + 1)
    except OSError as exc:
        raise SourceError(f"{location}: could not be downloaded: {exc}") from None
    if len(data) > limits.max_bytes:
        raise SourceError(f"{location} is over {limits.max_bytes:,} bytes")
    return bytes(data)


def unpack(data: bytes, name: str, target: Path, limits: Limits) -> None:
    """Unpack a .tar.gz or .zip into `target`, every member checked before anything is written."""
    target.mkdir(parents=True)
    if name.lower().split("?")[0].endswith(".zip"):
        try:
            _unzip(data, target, limits)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise SourceError(f"{name}: not a readable zip archive ({exc})") from None
        return
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            _untar(archive, name, target, limits)
    except tarfile.TarError as exc:
        raise SourceError(f"{name}: not a readable tar archive ({exc})") from None


def _untar(archive: tarfile.TarFile, name: str, target: Path, limits: Limits) -> None:
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in archive:  # streams: a 10,000-entry archive is refused at the limit, not read whole
        if len(members) >= limits.max_files:
            raise SourceError(f"{name} has more than {limits.max_files:,} entries")
        rel = _member_path(member.name, name)
        if member.issym() or member.islnk():
            base = PurePosixPath(rel).parent if member.issym() else PurePosixPath()
            _inside_link(rel, base, member.linkname, name)
        elif not (member.isfile() or member.isdir()):
            raise SourceError(f"{name}: {rel} is a device, FIFO or other special file")
        total += member.size
        if total > limits.max_bytes:
            raise SourceError(f"{name} unpacks to more than {limits.max_bytes:,} bytes")
        members.append(member)
    archive.extractall(target, members=members, filter="data")


def _unzip(data: bytes, target: Path, limits: Limits) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        if len(infos) > limits.max_files:
            raise SourceError(f"the archive has {len(infos):,} entries; at most {limits.max_files:,}")
        if sum(info.file_size for info in infos) > limits.max_bytes:
            raise SourceError(f"the archive unpacks to more than {limits.max_bytes:,} bytes")
        for info in infos:
            rel = _member_path(info.filename, "zip")
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if kind == stat.S_IFLNK:
                link = archive.read(info).decode("utf-8", "replace")
                _inside_link(rel, PurePosixPath(rel).parent, link, "zip")
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(link, target / rel)
            elif kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise SourceError(f"{rel} is a device, FIFO or other special file")
            elif info.is_dir():
                (target / rel).mkdir(parents=True, exist_ok=True)
            else:
                path = target / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, path.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                if mode & 0o111:
                    path.chmod(0o755)


def _member_path(member: str, archive: str) -> str:
    path = PurePosixPath(member)  # PurePosixPath drops "./" parts, keeps ".hidden" names
    if path.is_absolute() or ".." in path.parts:
        raise SourceError(f"{archive}: {member} is a path leaving the archive")
    return path.as_posix()


def _inside_link(rel: str, base: PurePosixPath, link: str, archive: str) -> None:
    """Refuse a (sym or hard) link whose target is absolute or climbs out of the archive."""
    depth = 0
    for part in (base / link).parts if not link.startswith("/") else ("..",):
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise SourceError(f"{archive}: {rel} is a link leaving the archive (to {link})")


# -- git ----------------------------------------------------------------------------------------

_GIT_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.http.allow=always",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "submodule.recurse=false",
    "advice.detachedHead=false",
)


def git(*args: str, cwd: Path | None = None, config: tuple[str, ...] = ()) -> str:
    """Run git with hooks, prompts and unlisted transports off (and `config` on top); raises SourceError
    with git's message."""
    command = ["git"]
    for setting in (*_GIT_CONFIG, *config):
        command += ["-c", setting]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/nonexistent"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }
    try:
        result = subprocess.run(
            [*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took over {GIT_TIMEOUT:g} s") from None
    except FileNotFoundError:
        raise SourceError("git is not installed; a git source needs it (apt-get install git)") from None
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SourceError(f"git {args[0]} failed: {message}")
    return result.stdout.strip()


def _clone(source: Source, target: Path, limits: Limits) -> str:
    """Clone (no checkout), refuse a history over the byte limit, check out the ref; the commit."""
    try:
        location, pins = pinned_git(source.location) if limits.public_only else (source.location, [])
    except OSError as exc:  # the name does not resolve (PrivateAddress, a ValueError, says itself)
        raise SourceError(f"{source.location}: {exc}") from None
    git("clone", "--quiet", "--no-checkout", "--", location, str(target), config=tuple(pins))
    history = sum(
        p.stat().st_size for p in (target / ".git").rglob("*") if p.is_file() and not p.is_symlink()
    )
    if history > limits.max_bytes:
        raise SourceError(
            f"{source.location}: the repository is {history:,} bytes; at most {limits.max_bytes:,}"
        )
    ref = source.ref or "HEAD"
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=target)
    except SourceError:
        commit = git("rev-parse", "--verify", f"origin/{ref}^{{commit}}", cwd=target)
    git("checkout", "--quiet", "--detach", commit, cwd=target)
    return commit


def _base_name(location: str) -> str:
    """The source's own name (a skill at the root of it is named like this directory)."""
    name = urllib.parse.urlsplit(location).path.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (*ARCHIVE_SUFFIXES, ".git"):
        name = name.removesuffix(suffix)
    return name if name and name not in (".", "..") else "source"


REMOTE_SCHEMES = ("http", "https", "git")


def is_remote(text: str) -> bool:
    """Whether a source names another machine by http(s) or git:// URL: not a path of this one, not
    file://, and not ssh, which would sign in with this machine's keys."""
    location = text.strip()
    return _is_url(location) and urllib.parse.urlsplit(location).scheme.lower() in REMOTE_SCHEMES


def _is_url(text: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*://", text, re.I) is not None
