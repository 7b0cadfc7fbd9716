"""Images on their way out of a tool (to a vision model, an MCP client, a chat): checked before they are
decoded (a corrupt file or a decompression bomb is a readable error), scaled down to MAX_SIDE and
re-encoded as PNG or JPEG within MAX_ENCODED bytes."""

from __future__ import annotations

import base64
import io
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from PIL import Image, UnidentifiedImageError

from ..events import ToolImage
from ..models.router import _litellm

if TYPE_CHECKING:
    from backends import Sandbox

MAX_BYTES = 20_000_000
"""The largest image file read (before downscaling)."""
MAX_SIDE = 1568
"""Longest side, in pixels, of what is sent (larger images are scaled down, aspect kept)."""
MAX_PIXELS = 100_000_000
"""An image that claims more pixels than this is refused before it is decoded (a decompression bomb)."""
MAX_ENCODED = 1_500_000
"""Most bytes of one image as sent: a PNG over it goes as a JPEG, then at half the size, until it fits
(every provider's per-image limit is above this; a chat upload of it is quick)."""
MAX_IMAGES = 4
"""Images one tool result carries; more are left out (their files stay where the tool put them)."""
Mime = Literal["image/png", "image/jpeg"]


class ImageError(Exception):
    """The image could not be read, or is not one."""


def tool_image(raw: bytes, where: str, *, to_model: bool = True) -> ToolImage:
    """`raw` bounded, labelled with `where` it is kept and what it is. Raises ImageError."""
    mime, data, described = bounded(raw)
    return ToolImage(
        mime=mime, data=base64.b64encode(data).decode(), label=f"{where} ({described})", to_model=to_model
    )


def bounded(raw: bytes) -> tuple[Mime, bytes, str]:
    """The image as PNG or JPEG bytes within MAX_SIDE and MAX_ENCODED, and a line describing it."""
    try:
        with Image.open(io.BytesIO(raw)) as probe:
            width, height = probe.size
            if width * height > MAX_PIXELS:
                raise ImageError(f"{width}x{height} pixels is over the {MAX_PIXELS:,}-pixel cap")
            probe.verify()  # structure and checksums, before any decoding
        with Image.open(io.BytesIO(raw)) as opened:
            opened.load()
            kind = opened.format or "image"
            image: Image.Image = opened
            if max(image.size) > MAX_SIDE:
                image.thumbnail((MAX_SIDE, MAX_SIDE))
            mime, data = _encode(image, jpeg=kind == "JPEG" and image.mode in ("RGB", "L"))
            while len(data) > MAX_ENCODED and max(image.size) > 64:  # a photo as PNG: JPEG, then smaller
                image = _flat(image)
                mime, data = _encode(image, jpeg=True)
                if len(data) > MAX_ENCODED:
                    image.thumbnail((image.width // 2, image.height // 2))
            sent = image.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageError(
            f"not an image that can be read (corrupt, truncated or another format): {exc}"
        ) from exc
    scaled = "" if sent == (width, height) else f", sent as {sent[0]}x{sent[1]}"
    return mime, data, f"{kind} {width}x{height}, {len(raw):,} bytes{scaled}"


def _encode(image: Image.Image, jpeg: bool) -> tuple[Mime, bytes]:
    out = io.BytesIO()
    if jpeg:
        image.save(out, "JPEG", quality=85)
        return "image/jpeg", out.getvalue()
    mode = image.mode if image.mode in ("RGB", "RGBA", "L", "LA") else "RGBA"
    image.convert(mode).save(out, "PNG")
    return "image/png", out.getvalue()


def _flat(image: Image.Image) -> Image.Image:
    """The image on white, without transparency (what JPEG can hold)."""
    if image.mode in ("RGB", "L"):
        return image
    rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, (255, 255, 255))
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


def accepts_images(model: str | None, setting: bool | None) -> bool:
    """Whether `model` takes images: the model.vision setting, else litellm's model table."""
    if setting is not None:
        return setting
    try:
        return bool(model) and bool(_litellm().supports_vision(model=model))
    except Exception:  # litellm does not know the model
        return False


def read_file(sandbox: Sandbox, path: str) -> bytes:
    """An image file of the sandbox, at most MAX_BYTES. Raises ImageError."""
    info = sandbox.runtime.fs_stat(path=path)
    if not info.get("exists"):
        raise ImageError("no such file in the sandbox")
    if info.get("type") not in (None, "file") or int(info.get("size", 0)) > MAX_BYTES:
        raise ImageError(f"not a file of at most {MAX_BYTES:,} bytes")
    with tempfile.TemporaryDirectory() as where:
        return Path(sandbox.download(path, where)).read_bytes()
