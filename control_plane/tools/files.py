"""read_file, write_file, patch, search_files, list_files: files in the session's sandbox."""

from __future__ import annotations

from pydantic import BaseModel, Field

from backends import RuntimeCallError

from .registry import ToolContext, ToolResult, tool

PATH = "A path in the sandbox, relative to the workspace or absolute."


class ReadArgs(BaseModel):
    path: str = Field(description=PATH)
    offset: int = Field(1, ge=1, description="First line to read (1-based).")
    limit: int = Field(500, ge=1, le=5000, description="Most lines to read.")


@tool("read_file", toolset="files", parallel_safe=True)
def read_file(ctx: ToolContext, args: ReadArgs) -> ToolResult:
    """Read a text file with line numbers, a page at a time (use offset for the next page)."""
    page = ctx.sandbox.runtime.fs_read(path=args.path, offset=args.offset, limit=args.limit)
    more = f"; more from offset {page['end'] + 1}" if page["more"] else ""
    note = f"\n[lines {page['start']}-{page['end']} of {page['total_lines']}{more}]"
    return ToolResult(page["content"] + note)


class WriteArgs(BaseModel):
    path: str = Field(description=PATH)
    content: str = Field(description="The whole new content of the file.")


@tool("write_file", toolset="files")
def write_file(ctx: ToolContext, args: WriteArgs) -> ToolResult:
    """Create or overwrite a text file (parent directories are created; an existing file keeps its mode)."""
    done = ctx.sandbox.runtime.fs_write(path=args.path, content=args.content)
    return ToolResult(f"wrote {done['bytes']} bytes to {done['path']}")


class PatchArgs(BaseModel):
    path: str = Field(description=PATH)
    old: str = Field(description="The exact text to replace, with enough context to occur once.")
    new: str = Field(description="The replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


@tool("patch", toolset="files")
def patch(ctx: ToolContext, args: PatchArgs) -> ToolResult:
    """Replace exact text in a file (find and replace); returns the diff. Fails, changing nothing, when the
    text is absent or occurs more than once."""
    try:
        done = ctx.sandbox.runtime.fs_patch(
            path=args.path, old=args.old, new=args.new, replace_all=args.replace_all
        )
    except RuntimeCallError as exc:
        closest = (exc.data or {}).get("closest") if isinstance(exc.data, dict) else None
        hint = "\nclosest lines in the file:\n" + "\n".join(closest) if closest else ""
        return ToolResult(f"error: {exc.message}{hint}", ok=False)
    return ToolResult(f"{done['replacements']} replacement(s) in {done['path']}\n{done['diff']}")


class SearchArgs(BaseModel):
    pattern: str = Field(description="A regular expression (or literal text with literal=true).")
    path: str = Field(".", description="Directory or file to search.")
    glob: str | None = Field(None, description="Only files matching this glob, e.g. '*.py'.")
    literal: bool = False
    ignore_case: bool = False
    limit: int = Field(100, ge=1, le=1000, description="Most matches to return.")


@tool("search_files", toolset="files", parallel_safe=True)
def search_files(ctx: ToolContext, args: SearchArgs) -> ToolResult:
    """Search file contents under a path (ripgrep): returns path:line: text for each match."""
    found = ctx.sandbox.runtime.fs_search(
        pattern=args.pattern,
        path=args.path,
        glob=args.glob,
        literal=args.literal,
        ignore_case=args.ignore_case,
        limit=args.limit,
    )
    lines = [f"{m['path']}:{m['line']}: {m['text']}" for m in found["matches"]]
    if found["truncated"]:
        lines.append(f"[stopped at {args.limit} matches; narrow the pattern or path]")
    return ToolResult("\n".join(lines) or "no matches")


class ListArgs(BaseModel):
    path: str = Field(".", description="The directory to list.")
    depth: int = Field(2, ge=1, le=10, description="How many levels deep.")
    hidden: bool = Field(False, description="Include dot files.")


@tool("list_files", toolset="files", parallel_safe=True)
def list_files(ctx: ToolContext, args: ListArgs) -> ToolResult:
    """List a directory tree (directories end with /, files show their size)."""
    listing = ctx.sandbox.runtime.fs_list(path=args.path, depth=args.depth, hidden=args.hidden)
    lines = [
        f"{e['name']}/"
        if e["type"] == "dir"
        else f"{e['name']} -> {e['target']}"
        if e["type"] == "symlink"
        else f"{e['name']}  ({e.get('size', 0):,} bytes)"
        for e in listing["entries"]
    ]
    if listing["truncated"]:
        lines.append("[listing cut; list a subdirectory]")
    return ToolResult("\n".join(lines) or f"{listing['path']} is empty")
