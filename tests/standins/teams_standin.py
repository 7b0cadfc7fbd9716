"""A local stand-in of Microsoft Teams' Bot Framework side, from the published references: the Bot
Connector REST API (https://learn.microsoft.com/en-us/azure/bot-service/rest-api/bot-framework-rest-connector-api-reference)
and its authentication (.../rest-api/bot-framework-rest-connector-authentication).

Implemented: the OpenID metadata (GET /v1/.well-known/openidconfiguration) and its key set
(GET /v1/.well-known/keys: one RSA key generated per stand-in, with `endorsements: ["msteams"]`); the
token endpoint (POST /{tenant}/oauth2/v2.0/token, grant_type=client_credentials, answering
{token_type, expires_in, ext_expires_in, access_token}); the connector's Send to Conversation
(POST /v3/conversations/{id}/activities), Reply to Activity (POST .../activities/{activityId}) and
Update Activity (PUT .../activities/{activityId}), each refusing a bearer token it did not issue (401).
The test's side plays Teams: `user_says` POSTs a message activity to the bot's messaging endpoint with
a JWT signed by the key (issuer https://api.botframework.com, audience the app id, serviceurl claim).

Files, from "Send and receive files using bot" and "Send and receive inline images" (Teams platform
docs) and OneDrive's upload sessions (Graph, driveItem: createUploadSession): the user's OneDrive is
played here too. A file a user sends is a `file.download.info` attachment whose `downloadUrl`
(GET /drive/{id}/download?tempauth=..., optionally answering 302 to /drive/{id}/content or to another
host) needs no token; a pasted image is an `image/png` attachment whose `contentUrl`
(GET /v3/attachments/{id}/views/original) needs the bot token. `consent` plays the user pressing a file
consent card: a `fileConsent/invoke` activity, with, when accepted, an upload session
(PUT /upload/{id} with `Content-Range: bytes a-b/total`: 202 with `nextExpectedRanges` until the last
range, then 201 with the driveItem). Every file request is kept in `file_requests`.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from standin_server import StandinServer, wait_listening

APP_ID = "6f1c2a3b-0000-4000-8000-00000000b07a"
APP_PASSWORD = "teams-test-secret"
TENANT = "botframework.com"
BOT_ID = f"28:{APP_ID}"
ISSUER = "https://api.botframework.com"


class TeamsStandin(StandinServer):
    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex
        self.tokens: list[str] = []
        """bot tokens issued by the token endpoint"""
        self.activities: list[dict[str, Any]] = []
        """every activity the connector took, with "id", "conversation", "method", "reply_to" """
        self.endpoint = ""
        self.drive: dict[str, tuple[str, bytes]] = {}
        """the user's OneDrive: file id -> (name, bytes); uploads land here when complete"""
        self.sessions: dict[str, dict[str, Any]] = {}
        """upload session id -> {"name", "received": bytearray, "ranges": [(first, last, total)]}"""
        self.file_requests: list[tuple[str, str, str | None]] = []
        """(method, path, its Authorization header) of every file request"""
        self.expires_in = 3599
        """the lifetime, in seconds, of the bot tokens the token endpoint issues"""
        super().__init__("teams-standin")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_url(self) -> str:
        return f"{self.base_url}/"

    def gateway_config(self, allow_users: list[str], **extra: Any) -> dict[str, Any]:
        """The gateway's teams settings for this stand-in, its messaging endpoint on a free port."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}/api/messages"
        return {
            "app_id": APP_ID, "app_password": APP_PASSWORD, "login_endpoint": self.base_url,
            "openid_metadata_url": f"{self.base_url}/v1/.well-known/openidconfiguration",
            "port": port, "allow_users": allow_users, "edit_interval": 0.05,
        } | extra  # fmt: skip

    # -- the test's side: Teams posting to the bot -----------------------------------------

    def wait_listening(self, timeout: float = 120) -> None:
        """Until the gateway's messaging endpoint accepts connections."""
        wait_listening(int(self.endpoint.split(":")[2].split("/")[0]), timeout)

    def sign(self, **claims: Any) -> str:
        """A Bot Framework JWT for the bot; `claims` override the valid ones (aud, exp, serviceurl...)."""
        now = int(time.time())
        body = {"iss": ISSUER, "aud": APP_ID, "nbf": now - 60, "iat": now - 60, "exp": now + 3600,
                "serviceurl": self.service_url} | claims  # fmt: skip
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": self.kid})

    def activity(
        self, user: str, text: str = "", *, conversation: str | None = None, group: bool = False,
        mention: bool = False, value: dict[str, Any] | None = None, name: str = "User",
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A message activity from `user` (in a personal chat with them unless `group`)."""
        entities = []
        if mention:
            text = f"<at>Hermetic</at> {text}"
            entities = [{"type": "mention", "text": "<at>Hermetic</at>",
                         "mentioned": {"id": BOT_ID, "name": "Hermetic"}}]  # fmt: skip
        found: dict[str, Any] = {
            "type": "message", "id": str(int(time.time() * 1000)) + secrets.token_hex(3), "text": text,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "channelId": "msteams",
            "serviceUrl": self.service_url, "entities": entities,
            "from": {"id": f"29:{user}", "name": name, "aadObjectId": user},
            "recipient": {"id": BOT_ID, "name": "Hermetic"},
            "conversation": {"id": conversation or f"a:{user}",
                             "conversationType": "groupChat" if group else "personal", "isGroup": group},
        }  # fmt: skip
        if value is not None:
            found["value"] = value
        if attachments is not None:
            found["attachments"] = attachments
        return found

    def file_attachment(self, name: str, data: bytes, redirect: str | None = None) -> dict[str, Any]:
        """A file the user sends, kept in their OneDrive: its `file.download.info` attachment, whose
        downloadUrl answers 302 to `redirect` ("content": the file's content URL here; else a URL)."""
        file_id = uuid.uuid4().hex
        with self._changed:
            self.drive[file_id] = (name, data)
        query = f"tempauth={secrets.token_urlsafe(8)}" + (f"&redirect={redirect}" if redirect else "")
        return {
            "contentType": "application/vnd.microsoft.teams.file.download.info",
            "contentUrl": f"https://contoso.sharepoint.com/personal/user/Documents/{name}", "name": name,
            "content": {"downloadUrl": f"{self.base_url}/drive/{file_id}/download?{query}",
                        "uniqueId": file_id, "fileType": name.rsplit(".", 1)[-1]},
        }  # fmt: skip

    def image_attachment(self, data: bytes, host: str | None = None) -> dict[str, Any]:
        """An image pasted into a message: its contentUrl on the connector (or on `host`)."""
        file_id = uuid.uuid4().hex
        with self._changed:
            self.drive[file_id] = ("pasted.png", data)
        base = f"http://{host}:{self.port}" if host else self.base_url
        return {"contentType": "image/png", "contentUrl": f"{base}/v3/attachments/{file_id}/views/original"}

    def consent(self, user: str, card: dict[str, Any], accept: bool = True) -> int:
        """The user presses Allow (or Decline) on a file consent card the bot sent: the invoke Teams
        POSTs, with an upload session in the user's OneDrive when allowed; the status answered."""
        (attachment,) = card["attachments"]
        content, name = attachment["content"], attachment["name"]
        action = "accept" if accept else "decline"
        context = content[f"{action}Context"]
        value: dict[str, Any] = {"type": "fileUpload", "action": action, "context": context}
        if accept:
            session, file_id = uuid.uuid4().hex, uuid.uuid4().hex
            with self._changed:
                self.sessions[session] = {"name": name, "id": file_id, "received": bytearray(), "ranges": []}
            value["uploadInfo"] = {
                "contentUrl": f"https://contoso.sharepoint.com/personal/user/Documents/Applications/{name}",
                "name": name, "uploadUrl": f"{self.base_url}/upload/{session}", "uniqueId": file_id,
                "fileType": name.rsplit(".", 1)[-1],
            }  # fmt: skip
        invoke = self.activity(user) | {"type": "invoke", "name": "fileConsent/invoke", "value": value,
                                        "replyToId": card["id"]}  # fmt: skip
        invoke.pop("text")
        return self.post(invoke)

    def post(self, activity: dict[str, Any], token: str | None = "") -> int:
        """POST `activity` to the bot's endpoint (signed validly unless `token` is given; None: no
        Authorization header); the HTTP status it answered."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token or self.sign()}"
        request = urllib.request.Request(self.endpoint, json.dumps(activity).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (loopback)
                return int(answer.status)
        except urllib.error.HTTPError as refused:
            return refused.code

    def user_says(self, user: str, text: str = "", **kw: Any) -> dict[str, Any]:
        """A message POSTed until the bot's endpoint listens and answers 200 (as Teams retries)."""
        activity = self.activity(user, text, **kw)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.post(activity) == 200:
                    return activity
            except OSError:  # not listening yet
                pass
            assert time.monotonic() < deadline, "the bot's endpoint never answered 200"
            time.sleep(0.05)  # a retry's pause, as Teams' own; not a wait for the gateway's work

    def messages(self, conversation: str) -> list[dict[str, Any]]:
        """The conversation's messages as they are now (each id's latest version), in order sent."""
        latest: dict[str, dict[str, Any]] = {}
        for sent in self.activities:
            if sent["conversation"] == conversation and sent.get("type") == "message":
                latest[sent["id"]] = sent  # an update replaces the whole activity
        return list(latest.values())

    def texts(self, conversation: str) -> list[str]:
        return [str(m.get("text", "")) for m in self.messages(conversation)]

    # -- the service -----------------------------------------------------------------------

    def _progress(self) -> object:
        return self.activities

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/.well-known/openidconfiguration", self._metadata)
        app.router.add_get("/v1/.well-known/keys", self._keys)
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        app.router.add_post("/v3/conversations/{conversation}/activities", self._send)
        app.router.add_post("/v3/conversations/{conversation}/activities/{activity}", self._send)
        app.router.add_put("/v3/conversations/{conversation}/activities/{activity}", self._update)
        app.router.add_get("/v3/attachments/{file}/views/original", self._image)
        app.router.add_get("/drive/{file}/download", self._download)
        app.router.add_get("/drive/{file}/content", self._content)
        app.router.add_put("/upload/{session}", self._upload)
        return app

    def _file_request(self, request: web.Request) -> None:
        with self._changed:
            self.file_requests.append((request.method, request.path, request.headers.get("Authorization")))
            self._changed.notify_all()

    async def _image(self, request: web.Request) -> web.StreamResponse:
        self._file_request(request)
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        return self._bytes(request.match_info["file"])

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """A pre-authorized download URL: its tempauth is the credential; a bearer token is refused."""
        self._file_request(request)
        if "tempauth" not in request.query or "Authorization" in request.headers:
            return web.json_response({"error": {"code": "accessDenied"}}, status=401)
        redirect = request.query.get("redirect")
        if redirect == "content":
            raise web.HTTPFound(f"/drive/{request.match_info['file']}/content")
        if redirect:
            raise web.HTTPFound(redirect)
        return self._bytes(request.match_info["file"])

    async def _content(self, request: web.Request) -> web.StreamResponse:
        self._file_request(request)
        return self._bytes(request.match_info["file"])

    def _bytes(self, file_id: str) -> web.StreamResponse:
        with self._changed:
            found = self.drive.get(file_id)
        if found is None:
            return web.json_response({"error": {"code": "itemNotFound"}}, status=404)
        return web.Response(body=found[1], content_type="application/octet-stream")

    async def _upload(self, request: web.Request) -> web.Response:
        """An upload session: each PUT a range of the file, in order; the last one completes it."""
        self._file_request(request)
        found = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", request.headers.get("Content-Range", ""))
        data = await request.read()
        with self._changed:
            session = self.sessions.get(request.match_info["session"])
            if session is None:
                return web.json_response({"error": {"code": "itemNotFound"}}, status=404)
            if found is None:
                return web.json_response({"error": {"code": "invalidRange"}}, status=400)
            first, last, total = (int(g) for g in found.groups())
            if first != len(session["received"]) or last - first + 1 != len(data) or last >= total:
                return web.json_response({"error": {"code": "invalidRange"}}, status=416)
            session["received"] += data
            session["ranges"].append((first, last, total))
            self._changed.notify_all()
            if len(session["received"]) < total:
                return web.json_response({"nextExpectedRanges": [f"{last + 1}-"]}, status=202)
            self.drive[session["id"]] = (session["name"], bytes(session["received"]))
        return web.json_response({"id": session["id"], "name": session["name"], "size": total}, status=201)

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response({
            "issuer": ISSUER, "authorization_endpoint": "https://invalid.botframework.com",
            "jwks_uri": f"{self.base_url}/v1/.well-known/keys",
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
        })  # fmt: skip

    async def _keys(self, request: web.Request) -> web.Response:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        key = public | {"kid": self.kid, "use": "sig", "endorsements": ["msteams"]}
        return web.json_response({"keys": [key]})

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if request.match_info["tenant"] != TENANT or form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "invalid_request"}, status=400)
        if form.get("client_id") != APP_ID or form.get("client_secret") != APP_PASSWORD:
            return web.json_response({"error": "invalid_client"}, status=401)
        token = secrets.token_urlsafe(24)
        with self._changed:
            self.tokens.append(token)
            self._changed.notify_all()
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": self.expires_in,
                "ext_expires_in": self.expires_in,
                "access_token": token,
            }
        )

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return scheme == "Bearer" and token in self.tokens

    async def _send(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        body = await request.json()
        reply_to = request.match_info.get("activity") or body.get("replyToId")
        return self._record(request, body, str(uuid.uuid4()), "POST", reply_to)

    async def _update(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        known = {a["id"]: a for a in self.activities}
        if request.match_info["activity"] not in known:
            return web.json_response({"error": {"code": "ActivityNotFound"}}, status=404)
        reply_to = known[request.match_info["activity"]]["reply_to"]  # an update keeps its place
        return self._record(request, await request.json(), request.match_info["activity"], "PUT", reply_to)

    def _record(
        self, request: web.Request, body: dict[str, Any], activity_id: str, method: str, reply_to: str | None
    ) -> web.Response:
        sent = body | {"id": activity_id, "conversation": request.match_info["conversation"],
                       "method": method, "reply_to": reply_to}  # fmt: skip
        with self._changed:
            self.activities.append(sent)
            self._changed.notify_all()
        return web.json_response({"id": activity_id})
