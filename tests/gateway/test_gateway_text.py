"""Splitting long replies at a platform's limit (control_plane/gateway/text.py)."""

from __future__ import annotations

import pytest

from control_plane.gateway.text import split, utf16_length


def test_a_short_text_is_one_part() -> None:
    assert split("hello", 10) == ["hello"]


@pytest.mark.parametrize("fence", ["```", "~~~~"])
def test_a_fence_cut_in_two_is_closed_and_reopened_with_its_language(fence: str) -> None:
    text = f"intro\n{fence}bash\n" + "".join(f"echo {i}\n" for i in range(50)) + f"{fence}\nafter"
    parts = split(text, 80)
    assert all(len(p) <= 80 for p in parts)
    for part in parts[1:-1]:
        assert part.startswith(f"{fence}bash\n") and part.endswith(fence)
    body = "".join(parts)
    assert all(f"echo {i}\n" in body for i in range(50))


def test_a_line_without_spaces_is_cut_hard_and_nothing_is_lost() -> None:
    text = "x" * 1000
    parts = split(text, 100)
    assert all(len(p) <= 100 for p in parts) and "".join(parts) == text


def test_utf16_units_are_counted_as_telegram_does() -> None:
    assert utf16_length("a😀") == 3
    parts = split("😀" * 3000, 4096, utf16_length)
    assert all(utf16_length(p) <= 4096 for p in parts) and "".join(parts) == "😀" * 3000


def test_markdown_as_plain_text_keeps_link_targets_list_marks_quotes_and_code_as_written() -> None:
    from control_plane.gateway.plain import to_plain

    markdown = (
        "## Steps\n\n1. run `make`\n2. see [the log](https://example.test/log)\n\n"
        "> it said\n> done\n\n```python\ndef f():\n    return **1**\n```\n\n![chart](https://example.test/c.png)"
    )
    assert to_plain(markdown).splitlines() == [
        "Steps",
        "",
        "1. run make",
        "2. see the log (https://example.test/log)",
        "",
        "> it said",
        "> done",
        "",
        "def f():",
        "    return **1**",
        "",
        "chart (https://example.test/c.png)",
    ]
