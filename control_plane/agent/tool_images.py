"""Tool results' images on their way to a model that can see them, in the form its provider takes:
Anthropic's tool_result holds images (litellm turns a tool message's image_url parts into its image
blocks); OpenAI's tool messages hold text only, so there the images follow the batch's tool messages as
one user message. Images join only the history sent to the model: the sessions database keeps each tool
message's text, which says where the image is kept. The newest KEEP_IMAGES stay; older ones leave the
history (their text stays), which bounds what every later step sends."""

from __future__ import annotations

from typing import Any

from ..config.settings import ModelSettings
from ..models.router import _litellm
from ..tools import ToolOutcome
from ..tools.images import accepts_images

Message = dict[str, Any]
KEEP_IMAGES = 3
"""Images kept in the history sent to the model (a browsing run takes screenshot after screenshot)."""
IMAGES_MARK = "[images the tool calls above returned"


def show_images(history: list[Message], outcomes: dict[str, ToolOutcome], model: ModelSettings) -> None:
    """Give the batch's images (`outcomes` by call id, its tool messages at the end of `history`) to the
    model, in place; then drop the images beyond the newest KEEP_IMAGES (all of them when the model, maybe
    switched to with /model, takes none)."""
    if not accepts_images(model.name, model.vision):
        _keep_newest(history, 0)
        return
    shown = {
        call: [_part(image.data_url) for image in outcome.images if image.to_model]
        for call, outcome in outcomes.items()
    }
    if not any(shown.values()):
        return
    if _in_tool_result(model.name):
        for at in range(len(history) - 1, -1, -1):
            message = history[at]
            if message.get("role") != "tool":
                break
            parts = shown.get(message.get("tool_call_id", ""))
            if parts:
                history[at] = {**message, "content": [{"type": "text", "text": message["content"]}, *parts]}
    else:
        labels = "; ".join(
            image.label for outcome in outcomes.values() for image in outcome.images if image.to_model
        )
        parts = [part for found in shown.values() for part in found]
        history.append(
            {"role": "user", "content": [{"type": "text", "text": f"{IMAGES_MARK}: {labels}]"}, *parts]}
        )
    _keep_newest(history, KEEP_IMAGES)


def without_images(content: Any) -> Any:
    """A message's content with its image parts left out (for text renderings of the history)."""
    if not isinstance(content, list):
        return content
    return [part for part in content if not (isinstance(part, dict) and part.get("type") == "image_url")]


def _keep_newest(history: list[Message], keep: int) -> None:
    kept = 0
    for at in range(len(history) - 1, -1, -1):
        message = history[at]
        content = message.get("content")
        if not isinstance(content, list) or message.get("role") not in ("tool", "user"):
            continue
        text = without_images(content)
        images = [part for part in content if part not in text]
        if not images:
            continue
        room = max(0, keep - kept)
        kept += min(room, len(images))
        if room >= len(images):
            continue
        if message["role"] == "tool":
            history[at] = {**message, "content": "".join(_text(part) for part in text)}
        elif not room and text and _text(text[0]).startswith(IMAGES_MARK):
            del history[at]  # only images, all of them old
        else:
            history[at] = {**message, "content": [*text, *images[len(images) - room :]] if room else text}


def _text(part: Any) -> str:
    return str(part.get("text", "")) if isinstance(part, dict) else str(part)


def _in_tool_result(model: str | None) -> bool:
    try:
        return bool(model) and _litellm().get_llm_provider(model)[1] == "anthropic"
    except Exception:  # litellm does not know the provider: the form every provider takes
        return False


def _part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}
