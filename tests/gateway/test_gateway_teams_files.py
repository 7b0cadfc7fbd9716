"""Files between Microsoft Teams and the gateway, both ways, against the Bot Framework stand-in
(tests/standins/teams_standin.py, which plays the user's OneDrive too): what a user sends (a file's
pre-authorized downloadUrl, a pasted image on the connector), what the agent sends (an inline image, a
file consent card and the upload it opens), and what is refused."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import SEND_A_FILE, Running, gateway_settings, wait_answered
from teams_standin import TeamsStandin

from control_plane.gateway import teams_files

OWNER = "0b5a1e6e-1111-4c2e-9d3a-00000000a11c"
OTHER = "7c9d2f40-2222-4b1a-8e5f-00000000b0b0"
GROUP = "19:meeting_abc@thread.v2"
CHAT = f"a:{OWNER}"
CONSENT = "application/vnd.microsoft.teams.card.file.consent"


@pytest.fixture
def teams() -> Iterator[TeamsStandin]:
    server = TeamsStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, teams: TeamsStandin, **extra: Any) -> Any:
    config = teams.gateway_config([OWNER], file_hosts=[f"127.0.0.1:{teams.port}"], **extra)
    return gateway_settings(tmp_path, llm_url, None, gateway={"teams": config})


def _cards(teams: TeamsStandin, kind: str, chat: str = CHAT) -> list[dict[str, Any]]:
    return [m for m in teams.messages(chat) if (m.get("attachments") or [{}])[0].get("contentType") == kind]


def test_a_file_and_a_pasted_image_sent_in_a_personal_chat_land_in_uploads(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    fake_llm.load([{"text": "got both"}])
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        attachments = [
            teams.file_attachment("data.csv", b"a,b\n1,2\n", redirect="content"),  # storage's 302, same host
            teams.image_attachment(b"\x89PNG pasted pixels"),
        ]
        teams.user_says(OWNER, "here you are", attachments=attachments)
        wait_answered(gateway, 1)
        assert teams.texts(CHAT) == ["got both"]
    told = fake_llm.requests[0]["messages"][-1]["content"]
    assert "uploads/data.csv (8 bytes)" in told and "uploads/image-2.png (18 bytes)" in told
    sent = {
        path.split("/")[-1] if "views" not in path else "image": auth for _, path, auth in teams.file_requests
    }
    assert sent == {"download": None, "content": None, "image": f"Bearer {teams.tokens[-1]}"}, (
        "the download URL carries its own credential; the bot token goes only to the connector"
    )


def test_a_file_off_file_hosts_redirected_elsewhere_too_large_or_in_a_group_is_said_and_not_fetched(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    fake_llm.load([{"text": "answered the text"}, {"text": "answered in the group"}])
    settings = _settings(tmp_path, fake_llm.url, teams, max_file_bytes=100, allow_chats=[GROUP])
    elsewhere = f"http://localhost:{teams.port}"  # loopback too, but not a listed host
    with Running(settings) as gateway:
        far = teams.file_attachment("far.txt", b"far away")
        far["content"]["downloadUrl"] = far["content"]["downloadUrl"].replace(teams.base_url, elsewhere)
        attachments = [
            far,
            teams.file_attachment("moved.txt", b"moved", redirect=f"{elsewhere}/drive/x/content"),
            teams.file_attachment("big.bin", b"x" * 1000),
            teams.image_attachment(b"\x89PNG", host="localhost"),  # not the connector: never the token
        ]
        teams.user_says(OWNER, "four files", attachments=attachments)
        wait_answered(gateway, 1)
        texts = teams.texts(CHAT)
        for name in ("far.txt", "moved.txt", "big.bin", "image-4.png"):
            assert any(t.startswith(f"I could not take your file {name}") for t in texts), (name, texts)
        assert texts[-1] == "answered the text"
        assert "redirected to" in next(t for t in texts if "moved.txt" in t)
        shared = {"contentType": "reference", "name": "plan.docx",
                  "contentUrl": "https://contoso.sharepoint.com/sites/ops/Documents/plan.docx"}  # fmt: skip
        teams.user_says(
            OTHER, "see the plan", conversation=GROUP, group=True, mention=True, attachments=[shared]
        )
        wait_answered(gateway, 2)
        (refusal, answer) = teams.texts(GROUP)
        assert "plan.docx" in refusal and "Microsoft Graph" in refusal and answer == "answered in the group"
    fetched = [(method, path.split("/")[-1], auth) for method, path, auth in teams.file_requests]
    assert fetched == [("GET", "download", None), ("GET", "download", None)], "moved.txt and big.bin only"


def test_a_file_the_agent_sends_in_a_personal_chat_is_a_consent_card_uploaded_in_ranges_when_allowed(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teams_files, "UPLOAD_RANGE", 3)  # "numbers\n" goes up in three ranges
    fake_llm.load(SEND_A_FILE + SEND_A_FILE + SEND_A_FILE)
    settings = _settings(tmp_path, fake_llm.url, teams)
    with Running(settings) as gateway:
        teams.user_says(OWNER, "a report please")
        wait_answered(gateway, 1)
        (card,) = _cards(teams, CONSENT)
        offered = card["attachments"][0]
        assert offered["name"] == "r.txt" and offered["content"]["sizeInBytes"] == 8
        assert teams.consent(OWNER, card) == 200
        (info,) = teams.wait_for(lambda: _cards(teams, "application/vnd.microsoft.teams.card.file.info"))
        teams.wait_for(lambda: "Sent: r.txt." in teams.texts(CHAT))
        (session,) = teams.sessions.values()
        assert session["ranges"] == [(0, 2, 8), (3, 5, 8), (6, 7, 8)]
        assert teams.drive[session["id"]] == ("r.txt", b"numbers\n")
        uploaded = info["attachments"][0]
        assert uploaded["name"] == "r.txt" and uploaded["contentUrl"].endswith("/Applications/r.txt")
        assert uploaded["content"] == {"uniqueId": session["id"], "fileType": "txt"}
        assert not [a for _, _, a in teams.file_requests if a], "the upload URL is pre-authorized: no token"

        teams.user_says(OWNER, "again, please")
        wait_answered(gateway, 2)
        declined = _cards(teams, CONSENT)[-1]
        assert teams.consent(OWNER, declined, accept=False) == 200
        teams.wait_for(lambda: "Not sent: r.txt (declined)." in teams.texts(CHAT))
        teams.user_says(OWNER, "and once more")
        wait_answered(gateway, 3)
        stale = _cards(teams, CONSENT)[-1]
    with Running(settings):  # a card of before the restart: its file is gone with the spool
        teams.wait_listening()
        assert teams.consent(OWNER, stale) == 200
        teams.wait_for(lambda: any("no longer here to send" in t for t in teams.texts(CHAT)))
    assert len(teams.drive) == 1, "neither the declined nor the stale file was uploaded"


def test_in_a_group_chat_an_image_goes_inline_and_another_file_is_refused_to_the_agent(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    def write_and_send(path: str, content: str) -> list[dict[str, Any]]:
        return [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]},
            {"tool_calls": [{"name": "send_file", "arguments": {"path": path}}]},
        ]

    fake_llm.load(
        write_and_send("chart.png", "a small chart") + write_and_send("r.txt", "numbers") + [{"text": "ok"}]
    )
    with Running(_settings(tmp_path, fake_llm.url, teams, allow_chats=[GROUP])) as gateway:
        teams.user_says(OWNER, "a chart and the numbers", conversation=GROUP, group=True, mention=True)
        wait_answered(gateway, 1)
    (inline,) = [m for m in teams.messages(GROUP) if m.get("attachments")]
    image = inline["attachments"][0]
    assert image["contentType"] == "image/png" and image["name"] == "chart.png"
    assert base64.b64decode(image["contentUrl"].removeprefix("data:image/png;base64,")) == b"a small chart"
    results = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert "only in a personal chat" in results[-1] and not _cards(teams, CONSENT, GROUP)
    assert teams.texts(GROUP)[-1] == "ok"
