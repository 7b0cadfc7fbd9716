"""A small recall corpus whose questions use other words than the sessions that answer them.

Each topic is one past session (what was said then) and a question asked later in different words: no
content word of the question appears in its session, so a keyword search requiring every word finds
nothing, and only meaning can connect them. Shared by tests/memory/test_semantic_recall.py. WordLlama rates
unrelated short texts up to about 0.2, so each question here is one it rates clearly above that against its
session.
"""

from __future__ import annotations

TOPICS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "auth": (
        [
            ("user", "people keep getting signed out: the session expiry after 30 s is far too short"),
            (
                "assistant",
                "I raised the cookie lifetime to twelve hours in settings.py and restarted the web app",
            ),
        ],
        "how did we fix the login timeout?",
    ),
    "database": (
        [
            ("user", "postgres refuses new connections when traffic peaks"),
            (
                "assistant",
                "the pool was exhausted; I set max_connections to 200 and added pgbouncer in front",
            ),
        ],
        "what was done about the sql server running out of client slots under heavy load?",
    ),
    "garden": (
        [
            ("user", "my tomato plants have yellow leaves"),
            ("assistant", "they lack nitrogen: feed them compost and water them every morning"),
        ],
        "advice for vegetables whose foliage was turning pale",
    ),
    "docker": (
        [
            ("user", "the container image is 3 GB and slow to push"),
            ("assistant", "a multi-stage build with a slim base cut the image to 180 MB"),
        ],
        "how was the bloated distribution shrunk so uploads got faster?",
    ),
    "travel": (
        [
            ("user", "book me a flight to Lisbon for the conference in May"),
            ("assistant", "booked TAP 1362, departing Tuesday morning, aisle seat, hotel near the venue"),
        ],
        "which plane ticket did you reserve for my trip to Portugal?",
    ),
    "email": (
        [
            ("user", "outgoing mail lands in spam at gmail"),
            ("assistant", "I added SPF and DKIM records to the DNS zone and now messages are delivered"),
        ],
        "what fixed our sent newsletters being treated as junk by recipients' inboxes?",
    ),
}

UNRELATED = ["what is a good recipe for banana bread?", "what time is sunset in oslo"]
"""Questions no topic answers, which WordLlama nevertheless rates 0.14-0.16 against the nearest message:
above the old default min_similarity (0.1), below the current one."""
