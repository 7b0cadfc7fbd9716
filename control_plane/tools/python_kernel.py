"""python: a stateful Python (a Jupyter kernel in the sandbox, sandboxes/kernel.py); variables persist
between calls, rich display() output comes back typed, figures are saved as files in the workspace and
PNG/JPEG ones come back as images of the result too."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from backends import SandboxError
from sandboxes.output import strip_escapes

from .images import MAX_IMAGES, ImageError, read_file, tool_image
from .registry import ToolContext, ToolResult, tool

if TYPE_CHECKING:
    from backends import Sandbox

    from ..events import ToolImage

log = logging.getLogger("hermetic.tools")

KERNEL_START = 60.0
"""Seconds a kernel may take to start, on top of the cell's timeout."""
FIGURES = "figures"
"""Where in the workspace figures are saved."""
PREFERRED = ("text/markdown", "text/plain", "text/html", "text/latex", "application/json")
"""Which form of a rich result the model reads, best first: a DataFrame's text/plain is shorter than
its HTML and says the same; a text/plain that is only a placeholder ("<... object>") is skipped."""


class PythonArgs(BaseModel):
    code: str = Field("", description="Python (IPython) code: a cell. Empty with restart=true: only restart.")
    timeout: float | None = Field(
        None, gt=0, description="Seconds before the cell is interrupted (default 120); the kernel lives on."
    )
    restart: bool = Field(False, description="Start a fresh kernel first (all variables are lost).")


@tool("python", toolset="code")
def python(ctx: ToolContext, args: PythonArgs) -> ToolResult:
    """Run Python in a persistent Jupyter kernel in the sandbox: variables, imports and loaded data
    stay between calls. The value of the last line is shown, like in a notebook; display() of
    Markdown, HTML tables and images works. Figures (PNG, SVG) are saved under figures/ in the
    workspace (and shown to you when you can see images). A cell over its timeout is interrupted and
    the kernel keeps its state."""
    sandbox = ctx.sandbox
    if args.restart:
        sandbox.runtime.kernel_restart(call_timeout=KERNEL_START)
        if not args.code.strip():
            return ToolResult("[the kernel was restarted: a fresh Python, no variables]")
    timeout = min(args.timeout or ctx.limits.tool_timeout, ctx.limits.max_tool_timeout)
    done = sandbox.runtime.kernel_run(
        code=args.code, timeout=timeout, figures=FIGURES, call_timeout=timeout + KERNEL_START + 10
    )
    parts = ["[a new kernel was started]\n"] if done["started"] and not args.restart else []
    parts += [_render(output) for output in done["outputs"]]
    status = done["status"]
    if status == "timeout":
        parts.append(f"\n[interrupted after {timeout:g} s; the kernel keeps its variables]")
    elif status == "died":
        parts.append(
            "\nerror: the Python kernel died while running this cell (out of memory, os._exit, a crash in "
            "native code); its variables are lost and the next call starts a fresh kernel"
        )
    figures = [output["image"] for output in done["outputs"] if output.get("image")]
    images = [image for figure in figures[:MAX_IMAGES] if (image := _figure(sandbox, figure)) is not None]
    return ToolResult("".join(parts) or "[no output]", ok=status == "ok", images=images)


def _figure(sandbox: Sandbox, figure: dict[str, Any]) -> ToolImage | None:
    """A saved raster figure as an image of the result; None for SVG (no rasteriser here: its file is
    the result) and for a file that cannot be read back."""
    if figure["mime"] not in ("image/png", "image/jpeg"):
        return None
    try:
        return tool_image(read_file(sandbox, figure["path"]), figure["path"])
    except (ImageError, SandboxError) as exc:
        log.warning("figure %s not attached: %s", figure["path"], exc)
        return None


def _render(output: dict[str, Any]) -> str:
    kind = output["type"]
    if kind == "stream":
        return str(output["text"])
    if kind == "error":
        trace = strip_escapes("\n".join(output["traceback"]))
        return f"{trace or output['ename'] + ': ' + output['evalue']}\n"
    data = output["data"]
    forms = [data[mime] for mime in PREFERRED if mime in data]
    text = next((form for form in forms if not _placeholder(form)), forms[0] if forms else "")
    image = output.get("image")
    if image is not None:
        kind_name = image["mime"].split("/")[1].split("+")[0].upper()
        text = f"[figure saved to {image['path']} ({kind_name}, {image['bytes']:,} bytes)]"
    prefix = "Out: " if kind == "result" and "\n" not in text else ""
    return f"{prefix}{text}\n"


def _placeholder(text: str) -> bool:
    return text.startswith("<") and text.endswith(" object>")
