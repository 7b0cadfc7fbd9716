"""read_file and write_file through the editor, when it offers `fs/read_text_file` / `fs/write_text_file`:
a file under the workspace is read from the editor (its unsaved buffer, if open) and written through it
(the editor shows and saves the change). Anything else, or an editor that refuses the request, goes to
the sandbox as usual. The tools keep their names, arguments and schemas; only this session's copies
change (`Conversation.tools`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from acp import Client
from acp.schema import ClientCapabilities

from ..tools import Tool, ToolContext, ToolResult
from ..tools.files import ReadArgs, WriteArgs
from .updates import host_path

log = logging.getLogger(__name__)
T = TypeVar("T")
WAIT_SECONDS = 60.0


@dataclasses.dataclass
class EditorFiles:
    client: Client
    session_id: str
    workspace: Path
    workdir: str
    loop: asyncio.AbstractEventLoop

    def tools(self, tools: dict[str, Tool[Any]], capabilities: ClientCapabilities) -> dict[str, Tool[Any]]:
        """`tools` with read_file / write_file replaced by the editor's, as far as the editor offers them."""
        fs = capabilities.fs
        changed = dict(tools)
        if fs is not None and fs.read_text_file and "read_file" in tools:
            changed["read_file"] = self._wrap(tools["read_file"], self._read)
        if fs is not None and fs.write_text_file and "write_file" in tools:
            changed["write_file"] = self._wrap(tools["write_file"], self._write)
        return changed

    def _wrap(self, tool: Tool[Any], through_editor: Any) -> Tool[Any]:
        def handler(ctx: ToolContext, args: Any) -> ToolResult | str:
            path = host_path(args.path, self.workspace, self.workdir)
            if path is not None:
                try:
                    return through_editor(path, args)  # type: ignore[no-any-return]
                except Exception as exc:  # the editor could not: the sandbox answers (or says why not)
                    log.info("%s through the editor failed (%s); using the sandbox", tool.name, exc)
            return tool.handler(ctx, args)

        return dataclasses.replace(tool, handler=handler)

    def _read(self, path: Path, args: ReadArgs) -> ToolResult:
        reply = self._call(
            self.client.read_text_file(
                session_id=self.session_id, path=str(path), line=args.offset, limit=args.limit
            )
        )
        lines = reply.content.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        numbered = "\n".join(f"{args.offset + i:6d}\t{line}" for i, line in enumerate(lines))
        end = args.offset + len(lines) - 1
        return ToolResult(f"{numbered}\n[lines {args.offset}-{end}, as the editor has the file]")

    def _write(self, path: Path, args: WriteArgs) -> ToolResult:
        self._call(
            self.client.write_text_file(session_id=self.session_id, path=str(path), content=args.content)
        )
        return ToolResult(f"wrote {len(args.content.encode())} bytes to {args.path} (through the editor)")

    def _call(self, request: Coroutine[Any, Any, T]) -> T:
        """From a tool's worker thread: the request on the connection's loop, waited for."""
        return asyncio.run_coroutine_threadsafe(request, self.loop).result(WAIT_SECONDS)
