"""The recall benchmark's corpus: 10,000 sessions, 200 of which answer one paraphrased question each.

A target session says "the <system> <symptom>" in one vocabulary (login page, times out after 30 seconds)
and how it was fixed; its question asks about the same in another (sign-in screen, hangs and gives up).
`check()` proves the paraphrase is real: no content word of a question appears in its target session.
The other 9,800 sessions are near misses: the same systems without a problem, or the same symptoms on
something else, so meaning alone must tell the target apart. A direct question (in the sessions' own
words) per target shows what keyword search does when the words match.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

# (how a session says it, how a question says it): no word shared within a pair
SYSTEMS = [
    ("login page", "sign-in screen"),
    ("postgres database", "sql datastore"),
    ("payment service", "billing backend"),
    ("docker image", "container build"),
    ("email server", "mail relay"),
    ("web cache", "proxy layer"),
    ("search index", "lookup engine"),
    ("mobile app", "phone client"),
    ("nightly backup", "scheduled snapshot"),
    ("kubernetes cluster", "k8s fleet"),
    ("dns records", "domain entries"),
    ("ssl certificate", "tls cert"),
    ("message queue", "event broker"),
    ("user uploads", "customer attachments"),
    ("cron job", "timed task"),
    ("api gateway", "edge router"),
    ("log files", "journal output"),
    ("video player", "media playback"),
    ("shopping cart", "checkout basket"),
    ("password reset", "credential recovery"),
]
SYMPTOMS = [
    ("times out after 30 seconds", "hangs and gives up"),
    ("crashes on startup", "dies when booting"),
    ("runs out of memory", "exhausts its ram"),
    ("is very slow", "lags badly"),
    ("returns wrong results", "gives incorrect answers"),
    ("fills the disk", "eats all storage"),
    ("rejects valid requests", "refuses legitimate calls"),
    ("loses data", "misplaces information"),
    ("sends duplicates", "delivers repeats"),
    ("breaks after the upgrade", "fails since updating"),
]
OTHER_THINGS = ["laptop", "printer", "coffee machine", "bicycle", "garden hose", "car radio", "oven", "tv"]
REMEDIES = [
    "I raised the limit in the config and restarted it",
    "I rolled back the last release",
    "I added an index and rewrote the slow query",
    "I pinned the library to the previous version",
    "I deleted old files and added a rotation policy",
    "I fixed the retry loop so it stops after three attempts",
    "I moved it to a bigger machine",
    "I corrected the timezone handling",
]
CALM = [
    "the {s} works fine after the change, thanks",
    "can you explain how the {s} is configured here?",
    "please document the {s} setup for the new team member",
    "we are planning to move the {s} next quarter",
]
OFF_TOPIC = [
    "what is a good recipe for banana bread?",
    "who won the football match yesterday",
    "translate hello into french",
    "tell me a joke about cats",
    "what's the capital of australia",
    "recommend a novel to read on holiday",
    "how many moons does jupiter have",
    "knitting a wool scarf pattern",
    "best hiking trails near the alps",
    "how do I tune a guitar",
    "the history of the roman empire",
    "my daughter's birthday party ideas",
    "quantum entanglement explained simply",
    "pizza dough hydration",
    "what time is sunset in oslo",
    "learn to play chess openings",
    "symptoms of the common cold",
    "weather tomorrow",
    "poem about autumn leaves",
    "how to fold a paper crane",
    "how did we configure the terraform state bucket?",
    "what was the name of the font we picked for the logo",
    "the rust borrow checker complains about lifetimes",
    "which graphql schema did we settle on",
    "set up a python virtualenv",
    "what did the lawyer say about the contract",
    "my knee hurts after running",
    "convert this csv to parquet",
    "how do I centre a div",
    "what's the best way to learn japanese",
]
"""Questions no session of the corpus answers: a semantic search should find nothing for them."""
_WORD = re.compile(r"[\w-]+")
STOPWORDS = {"the", "and", "its", "all", "it", "a", "to", "of", "so"}
"""Words that carry no meaning of their own: a question may share these with its session."""


@dataclass(frozen=True)
class Question:
    paraphrased: str
    direct: str
    target: int
    """Index of the session that answers it."""


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def build(sessions: int = 10_000, seed: int = 11) -> tuple[list[list[dict[str, Any]]], list[Question]]:
    """The sessions (chat messages each) in a shuffled order, and one question per target session."""
    rng = random.Random(seed)
    chats: list[list[dict[str, Any]]] = []
    pending: list[tuple[str, str, str, str]] = []
    for system, system_q in SYSTEMS:
        for symptom, symptom_q in SYMPTOMS:
            chats.append(
                [
                    {"role": "user", "content": f"the {system} {symptom}"},
                    {"role": "assistant", "content": f"Found the cause. {rng.choice(REMEDIES)}."},
                ]
            )
            pending.append((system, symptom, system_q, symptom_q))
    targets = len(chats)
    while len(chats) < sessions:
        if rng.random() < 0.5:
            text = rng.choice(CALM).format(s=rng.choice(SYSTEMS)[0])
        else:
            text = f"my {rng.choice(OTHER_THINGS)} {rng.choice(SYMPTOMS)[0]}"
        chats.append(
            [{"role": "user", "content": text}, {"role": "assistant", "content": "Let me look into it."}]
        )
    order = list(range(len(chats)))
    rng.shuffle(order)
    position = {old: new for new, old in enumerate(order)}
    shuffled = [chats[old] for old in order]
    questions = [
        Question(f"the {system_q} {symptom_q}", f"the {system} {symptom}", position[i])
        for i, (system, symptom, system_q, symptom_q) in enumerate(pending[:targets])
    ]
    return shuffled, questions


def check(chats: list[list[dict[str, Any]]], questions: list[Question]) -> None:
    """Raises AssertionError unless every paraphrased question shares no content word with its session."""
    for q in questions:
        said = set().union(*(words(m["content"]) for m in chats[q.target]))
        shared = (words(q.paraphrased) - STOPWORDS) & said
        assert not shared, f"{q.paraphrased!r} shares {shared} with its session"
