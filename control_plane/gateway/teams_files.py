"""Files between Microsoft Teams and the gateway, by the Teams bot APIs (learn.microsoft.com, "Send and
receive files using bot"; "Send and receive inline images"), with the Teams SDK's models.

In: a file a user sends in a personal chat comes as an `application/vnd.microsoft.teams.file.download.info`
attachment whose `downloadUrl` is pre-authorized (no token is sent); it is read only from `file_hosts`
(`.sharepoint.com` unless set), over https (http only on a loopback host), following a redirect only to
another such URL. An image pasted into the message comes as an `image/*` attachment whose `contentUrl`
the connector serves to the bot's token: that token goes only to the conversation's service URL, whose
origin the inbound JWT vouched for, and no redirect is followed from there. Files sent in group chats
and channels live in SharePoint, reachable only through Microsoft Graph (not used here): the user is
told so.

Out: an image small enough to ride inside the message goes inline (a `data:` URL, any chat). Any other
file, in a personal chat only, is offered with a file consent card; when the user accepts, Teams sends
a `fileConsent/invoke` with an upload session URL (OneDrive), the file is PUT there in ranges, and a
file info card points at it. Until then the file waits in a spool directory (the newest MAX_PENDING; a
restarted gateway has none, and says so if a card of before is accepted).
"""

from __future__ import annotations

import base64
import mimetypes
import shutil
import tempfile
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
from microsoft_teams.api.activities.message.message import MessageActivity
from microsoft_teams.api.models import Attachment as TeamsAttachment
from microsoft_teams.api.models import FileConsentCard, FileInfoCard, FileUploadInfo
from microsoft_teams.api.models.file import FILE_DOWNLOAD_INFO_CONTENT_TYPE, FileDownloadInfo
from pydantic import ValidationError

from ..config.chat import TeamsSettings, loopback
from ..tls import client_tls
from .base import AdapterError, Attachment, ConnectionLost
from .files import download, listed_host, safe_name

CONSENT_CARD = "application/vnd.microsoft.teams.card.file.consent"
INFO_CARD = "application/vnd.microsoft.teams.card.file.info"
INLINE_IMAGE_BYTES = 18_000
"""The largest image sent inside a message: its data URL must fit the ~28 KB Teams takes per message."""
MAX_PENDING = 50
"""Files offered with a consent card and not yet accepted, at most (the oldest is dropped)."""
UPLOAD_RANGE = 320 * 1024 * 13
"""Bytes PUT at once to an upload session: a multiple of 320 KiB, under OneDrive's 60 MiB a request."""
_BOT = "bot:"
"""The ref of an attachment fetched with the bot's token (an inline image on the service URL)."""
_GRAPH = "graph:"
"""The ref of a file only Microsoft Graph can read (sent in a group chat or channel)."""
IN_GROUPS = (
    "Teams keeps files sent in group chats and channels in SharePoint, which a bot reads only through "
    "Microsoft Graph (not used by this gateway): send it to me in a personal chat"
)


class TeamsFiles:
    def __init__(self, settings: TeamsSettings, bot_token: Callable[[], Awaitable[str]]) -> None:
        self.settings = settings
        self._bot_token = bot_token
        self._spool = Path(tempfile.mkdtemp(prefix="hermetic-teams-"))
        self._pending: OrderedDict[str, tuple[Path, str]] = OrderedDict()
        """upload id -> the spooled file a consent card offers, and its name"""

    def close(self) -> None:
        shutil.rmtree(self._spool, ignore_errors=True)

    # -- in ----------------------------------------------------------------------------------

    def attachments(self, activity: MessageActivity, service_url: str) -> list[Attachment]:
        """The files of a user's message, each with the ref `fetch` reads it by."""
        found = []
        for number, item in enumerate(activity.attachments or [], 1):
            kind, name = (item.content_type or "").lower(), item.name or f"file-{number}"
            if kind == FILE_DOWNLOAD_INFO_CONTENT_TYPE:  # no downloadUrl: a file only Graph can read
                url = _download_url(item.content)
                found.append(Attachment(name=name, ref=url or _GRAPH + (item.content_url or "")))
            elif kind.startswith("image/") and item.content_url:
                url = item.content_url
                ref = _BOT + url if urlsplit(url)[:2] == urlsplit(service_url)[:2] else url
                found.append(Attachment(name=item.name or f"image-{number}{_extension(kind)}", ref=ref))
            elif kind == "reference":  # a SharePoint file shared in a group chat or channel
                found.append(Attachment(name=name, ref=_GRAPH + (item.content_url or "")))
        return found

    async def fetch(self, attachment: Attachment) -> bytes:
        ref, limit = attachment.ref, self.settings.max_file_bytes
        if ref.startswith(_GRAPH):
            raise AdapterError(IN_GROUPS)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            if ref.startswith(_BOT):  # the connector's own URL: the bot token, no redirect
                headers = {"Authorization": f"Bearer {await self._bot_token()}"}
                return await download(session, ref.removeprefix(_BOT), limit, attachment.name, headers)
            if not self.allowed(ref):
                hosts = ", ".join(self.settings.file_hosts) or "no host (file_hosts is empty)"
                raise AdapterError(f"files are taken only from {hosts} over https, not from {ref[:200]}")
            return await download(session, ref, limit, attachment.name, follow=self.allowed)

    def allowed(self, url: str) -> bool:
        """Whether files are read from (and uploaded to) `url`: https on `file_hosts` (http on loopback)."""
        parts = urlsplit(url)
        secure = parts.scheme == "https" or loopback(parts.hostname or "")
        return secure and listed_host(url, self.settings.file_hosts)

    # -- out ---------------------------------------------------------------------------------

    @staticmethod
    def inline_image(path: Path) -> TeamsAttachment | None:
        """The file as an image inside the message, when it is one small enough (else None)."""
        kind = mimetypes.guess_type(path.name)[0] or ""
        if not kind.startswith("image/") or path.stat().st_size > INLINE_IMAGE_BYTES:
            return None
        data = base64.b64encode(path.read_bytes()).decode()
        return TeamsAttachment(content_type=kind, content_url=f"data:{kind};base64,{data}", name=path.name)

    def consent_card(self, path: Path, caption: str) -> TeamsAttachment:
        """A file consent card offering `path`, spooled until the user accepts or declines."""
        if path.stat().st_size == 0:
            raise AdapterError(f"{path.name} is empty: there is nothing to send")
        upload = uuid.uuid4().hex
        self._spool.mkdir(exist_ok=True)
        spooled = self._spool / upload
        shutil.copyfile(path, spooled)
        self._pending[upload] = (spooled, safe_name(path.name))
        while len(self._pending) > MAX_PENDING:
            _, (dropped, _) = self._pending.popitem(last=False)
            dropped.unlink(missing_ok=True)
        card = FileConsentCard(
            description=caption or path.name, size_in_bytes=spooled.stat().st_size,
            accept_context={"upload": upload}, decline_context={"upload": upload},
        )  # fmt: skip
        return TeamsAttachment(content_type=CONSENT_CARD, name=safe_name(path.name), content=_wire(card))

    def taken(self, context: Any) -> tuple[Path, str] | None:
        """The spooled file a consent card's answer names and its name, no longer pending (None: not
        known here)."""
        upload = context.get("upload") if isinstance(context, dict) else None
        return self._pending.pop(str(upload), None) if upload else None

    async def upload(self, spooled: Path, info: FileUploadInfo) -> TeamsAttachment:
        """PUT the file to the upload session the user's acceptance opened; the file info card for it."""
        if not info.upload_url or not self.allowed(info.upload_url):
            raise AdapterError(f"the upload URL is not on file_hosts: {str(info.upload_url)[:200]}")
        total = spooled.stat().st_size
        try:
            async with httpx.AsyncClient(timeout=300, verify=client_tls()) as http:
                with spooled.open("rb") as handle:
                    for start in range(0, total, UPLOAD_RANGE):
                        chunk = handle.read(UPLOAD_RANGE)
                        last = start + len(chunk) - 1
                        headers = {"Content-Range": f"bytes {start}-{last}/{total}"}
                        answer = await http.put(info.upload_url, content=chunk, headers=headers)
                        if answer.status_code >= 500:
                            raise ConnectionLost(f"the upload session answered {answer.status_code}")
                        if answer.status_code not in (200, 201, 202):
                            raise AdapterError(
                                f"the upload session refused: {answer.status_code} {answer.text[:200]}"
                            )
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"the upload session is unreachable: {exc}") from exc
        finally:
            spooled.unlink(missing_ok=True)
        card = FileInfoCard(unique_id=info.unique_id, file_type=info.file_type)
        return TeamsAttachment(
            content_type=INFO_CARD, content_url=info.content_url, name=info.name, content=_wire(card)
        )


def _extension(kind: str) -> str:
    return mimetypes.guess_extension(kind) or ".png"


def _download_url(content: Any) -> str | None:
    try:
        return FileDownloadInfo.model_validate(content).download_url if content is not None else None
    except ValidationError:
        return None


def _wire(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True))
