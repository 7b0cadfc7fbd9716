"""The threat scan's vocabulary and rules: the families, severities and the patterns of each rule.

threats.py runs them (`scan`); a rule is (family, rule, needles, pattern), matched against NFKC-normalised
text and tried only when one of its needles (lower case, single spaces) occurs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from typing import Literal

Family = Literal[
    "injection",
    "role-hijack",
    "exfiltration",
    "persistence",
    "secret",
    "invisible-unicode",
    "reverse-shell",
    "download-exec",
    "destructive",
]
FAMILIES: tuple[Family, ...] = (
    "injection",
    "role-hijack",
    "exfiltration",
    "persistence",
    "secret",
    "invisible-unicode",
)
"""The default scan: what a planted instruction in prose looks like."""
SCRIPT_FAMILIES: tuple[Family, ...] = ("reverse-shell", "download-exec", "destructive")
"""Opt-in: commands that are harmful when run, even where a note may mention them."""


class Severity(StrEnum):
    """How sure a finding is to be harm rather than documentation: what a reviewer must decide on."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def lowered(self) -> Severity:
        """One step down (LOW stays LOW)."""
        return _ORDER[max(0, self.rank - 1)]


_ORDER = (Severity.LOW, Severity.MEDIUM, Severity.HIGH)
_RANK = {severity: rank for rank, severity in enumerate(_ORDER)}


_SECRET_FILE = (
    r"(?:\.env(?![\w.-])|\.ssh/|id_(?:rsa|dsa|ecdsa|ed25519)\b|\.aws/credentials|\.netrc|\.pgpass"
    r"|\.git-credentials|\.docker/config\.json|\.kube/config|\.npmrc|\.pypirc|/etc/shadow)"
)
_WRITE_TO = r"(?:>>?\s*|\btee\s+(?:-a\s+)?|\bsed\s+-i\S*\s+(?:'[^']*'|\"[^\"]*\"|\S+)\s+)"
_SHELL_RC = (
    r"(?:\.bashrc|\.bash_profile|\.bash_login|\.profile|\.zshrc|\.zprofile|\.zshenv|\.zlogin"
    r"|/etc/profile|/etc/bash\.bashrc|/etc/environment|config\.fish)\b"
)
_SECRET_VAR = r"\$\{?[A-Za-z_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)[A-Za-z_]*\}?"
_NETWORK_TOOL = r"\b(?:curl|wget|nc|ncat|netcat|socat|Invoke-WebRequest|iwr)\b"
_SHELL = r"(?:/usr/bin/|/bin/)?(?:ba|z|da|k)?sh\b"
_INTERPRETER = rf"(?:sudo\s+(?:-\S+\s+)*)?(?:{_SHELL}|python[\d.]*\b|perl\b|ruby\b|node\b|iex\b)"
_PIPE = r"(?<!\|)\|(?!\|)"
"""A pipe, not `||`."""
_SYSTEM_DIR = r"(?:bin|boot|dev|etc|home|lib|lib64|opt|root|sbin|srv|usr|var)"
# rm's target that takes a system down: /, /*, ~, $HOME, a top-level system directory
_RM_TARGET = rf"[\"']?(?:/\*?|~/?\*?|\$\{{?HOME\}}?/?\*?|/{_SYSTEM_DIR}/?\*?)[\"']?(?=\s|$|[;&|)])"

# (family, rule, needles, pattern). The pattern is matched against the NFKC-normalised text, so full-width
# letters do not hide; it is tried only when one of the needles (lower case, single spaces) occurs, which
# makes the scan of an ordinary note a few substring checks (a tenth of the time of the patterns alone).
RULES: list[tuple[Family, str, tuple[str, ...], re.Pattern[str]]] = [
    (
        "injection",
        "ignore-instructions",
        ("ignore", "disregard", "forget", "override", "bypass"),
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:(?:all|any|every|the|your|my|of|these)\s+)*"
            r"(?:previous|prior|above|earlier|preceding|former|system|original|safety|existing)\s+"
            r"(?:instructions?|prompts?|rules|directions|directives|guidelines|messages?|context)\b",
            re.I,
        ),
    ),
    (
        "injection",
        "new-identity",
        ("you are now", "from now on", "act as"),
        re.compile(
            r"\byou\s+are\s+now\s+(?:an?\s+|the\s+|my\s+|no\s+longer\b|in\s+\w+\s+mode\b|free\b|unrestricted\b"
            r"|jailbroken\b|DAN\b)|\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must|shall)\b"
            r"|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|jailbroken|evil)\b",
            re.I,
        ),
    ),
    (
        "injection",
        "instruction-header",
        ("system prompt", "instructions", "developer message"),
        re.compile(
            r"\b(?:system\s+prompt|new\s+instructions|updated\s+instructions|override\s+instructions"
            r"|developer\s+message)\s*:",
            re.I,
        ),
    ),
    (
        "injection",
        "reveal-prompt",
        ("system prompt", "instructions"),
        re.compile(
            r"\b(?:reveal|print|show|repeat|output|leak|dump)\s+(?:your|the)\s+(?:full\s+|hidden\s+)?"
            r"(?:system\s+prompt|initial\s+instructions|hidden\s+instructions)\b",
            re.I,
        ),
    ),
    (
        "injection",
        "conceal-from-user",
        ("the user",),
        re.compile(
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|mention\s+(?:this\s+|it\s+)?to|reveal\s+(?:this\s+)?to)"
            r"\s+the\s+user\b|\bwithout\s+(?:telling|informing|asking)\s+the\s+user\b",
            re.I,
        ),
    ),
    (
        "injection",
        "jailbreak-mode",
        (" mode",),
        re.compile(r"\b(?:developer|DAN|jailbreak|god)\s+mode\s+(?:enabled|activated|on)\b", re.I),
    ),
    (
        "role-hijack",
        "chat-template-token",
        ("<", "[inst", "[/inst"),
        re.compile(
            r"<\|[a-z_]{2,30}\|>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>"
            r"|</?(?:system|assistant|developer|tool_response)(?:\s[^>]*)?>",
            re.I,
        ),
    ),
    (
        "role-hijack",
        "fake-assistant-turn",
        ("assistant", "human"),
        re.compile(r"(?im)^[ \t>#*]*(?:assistant|human)\s*:"),
    ),
    (
        "role-hijack",
        "fake-system-turn",
        ("system", "developer"),
        # "System: Debian 12" is a note; "system: you must ..." speaks to the model.
        re.compile(
            r"(?im)^[ \t>#*]*(?:system|developer)\s*:\s*(?:you|your|ignore|disregard|from\s+now\s+on|always|"
            r"never|do\s+not|don't|new\s+(?:instructions|rules)|override|the\s+(?:assistant|model|agent))\b"
        ),
    ),
    (
        "exfiltration",
        "network-send-secret",
        ("$", "`"),
        re.compile(
            rf"{_NETWORK_TOOL}[^\n]*(?:{_SECRET_VAR}|\$\(\s*(?:env|printenv|cat)\b|`\s*(?:env|printenv|cat)\b)"
        ),
    ),
    (
        "exfiltration",
        "network-upload-file",
        ("@", "-t ", "--upload-file", "--post-file"),
        re.compile(
            r"\b(?:curl|wget)\b[^\n]*(?:\s(?:-d|--data(?:-binary|-raw|-urlencode)?)\s*[\"']?@"
            r"|\s-F\s*[\"']?[\w-]+=@|\s--form\s+[\"']?[\w-]+=@|\s(?:-T|--upload-file)\s|\s--post-file[=\s])"
        ),
    ),
    (
        "exfiltration",
        "pipe-to-network",
        ("|",),
        re.compile(
            r"\b(?:env|printenv|set|cat|tar|zip|base64)\b[^\n|]*\|\s*(?:base64\s*(?:-\w+\s*)*\|\s*)?"
            r"(?:curl|wget|nc|ncat|netcat|socat)\b"
        ),
    ),
    (
        "exfiltration",
        "read-secret-file",
        (
            ".env",
            ".ssh",
            "id_",
            ".aws",
            ".netrc",
            ".pgpass",
            ".git-credentials",
            ".docker",
            ".kube",
            ".npmrc",
            ".pypirc",
            "shadow",
        ),
        re.compile(rf"\b(?:cat|base64|xxd|scp)\s+[^\n;|&]*?{_SECRET_FILE}"),
    ),
    (
        "exfiltration",
        "send-secrets",
        ("send", "post", "upload", "forward", "exfiltrate", "leak", "email", "transmit"),
        re.compile(
            r"\b(?:send|post|upload|forward|exfiltrate|leak|email|transmit)\s+(?:(?:the|all|your|any|its)\s+)*"
            r"(?:contents?\s+of\s+(?:the\s+)?)?(?:api[\s_-]?keys?|secrets?|credentials?|(?:access|auth|api|bearer)\s+"
            r"tokens?|passwords?|private\s+keys?|ssh\s+keys?|env(?:ironment)?\s+variables|\.env|conversation\s+history"
            r"|chat\s+history"
            r"|system\s+prompt)\b",
            re.I,
        ),
    ),
    (
        "persistence",
        "ssh-authorized-keys",
        ("authorized_keys", "ssh-copy-id"),
        re.compile(
            r"(?:>>?\s*|\btee\s+(?:-a\s+)?)\S*authorized_keys|\bssh-copy-id\b"
            r"|\b(?:add|append|put|write|insert)\b[^\n]{0,60}\bauthorized_keys\b",
            re.I,
        ),
    ),
    (
        "persistence",
        "shell-rc-write",
        (".bash", ".profile", ".zsh", ".zlogin", "/etc/profile", "/etc/environment", "config.fish"),
        re.compile(rf"{_WRITE_TO}\S*{_SHELL_RC}"),
    ),
    (
        "persistence",
        "cron",
        ("cron", "@reboot"),
        re.compile(
            r"\|\s*crontab\b|\bcrontab\s+(?:-u\s+\S+\s+)?(?:-e\b|-(?:\s|$)|[~/.][\w./~-]*)|/etc/cron\.|/var/spool/cron"
            r"|@reboot\b"
        ),
    ),
    (
        "persistence",
        "systemd-unit",
        ("systemctl", "systemd"),
        re.compile(
            r"\bsystemctl\s+(?:--user\s+)?enable\b|(?:>>?\s*|\btee\s+|\b(?:cp|mv|ln\s+-s)\s+\S+\s+)"
            r"\S*(?:/systemd/system/|/systemd/user/|\.config/systemd/)"
        ),
    ),
    (
        "persistence",
        "autostart",
        ("rc.local", "ld.so.preload", "autostart", "ld_preload"),
        re.compile(r"/etc/rc\.local\b|/etc/ld\.so\.preload\b|\.config/autostart/|\bLD_PRELOAD="),
    ),
    (
        "reverse-shell",
        "dev-tcp",
        ("/dev/tcp/", "/dev/udp/"),
        re.compile(r"/dev/(?:tcp|udp)/[\w.$-]+/\$?\w+"),
    ),
    (
        "reverse-shell",
        "netcat-exec",
        ("nc ", "ncat", "netcat"),
        re.compile(r"\b(?:nc|ncat|netcat)\b[^\n]*\s(?:-e|-c|--exec|--sh-exec|--lua-exec)[\s=]"),
    ),
    (
        "reverse-shell",
        "socat-exec",
        ("socat",),
        re.compile(r"\bsocat\b[^\n]*\b(?:exec|system):", re.I),
    ),
    (
        "reverse-shell",
        "fifo-relay",
        ("mkfifo", "mknod"),
        re.compile(r"\b(?:mkfifo|mknod)\b[^\n]*\b(?:nc|ncat|netcat|telnet|openssl\s+s_client)\b"),
    ),
    (
        "reverse-shell",
        "socket-shell",
        ("dup2", "pty.spawn"),
        # the classic python one-liner: the socket's descriptors become the shell's stdio
        re.compile(r"\bdup2\(\s*\w+\.fileno\(\)|\bpty\.spawn\(\s*[\"'](?:/bin/)?(?:ba|z)?sh[\"']"),
    ),
    (
        "download-exec",
        "pipe-to-shell",
        ("|",),
        # pipeline stages (a backslash-newline continues the line), then the interpreter and its arguments;
        # _runs_stdin decides whether it runs what it reads
        re.compile(
            rf"\b(?:curl|wget|fetch|iwr|Invoke-WebRequest|Invoke-RestMethod|irm)\b(?:[^\n|]|\\\n)*"
            rf"(?:{_PIPE}(?:[^\n|]|\\\n)*)*?{_PIPE}\s*(?P<interpreter>{_INTERPRETER})(?P<args>[^\n|;&)`]*)",
            re.I,
        ),
    ),
    (
        "download-exec",
        "shell-of-download",
        ("curl", "wget"),
        re.compile(
            r"(?:\b(?:ba|z|da)?sh|\bsource|\beval|\bpython[\d.]*|(?:^|[;&|]\s*)\.)\s+(?:-c\s+)?[\"']?"
            r"(?:<\(|\$\(|`)\s*(?:curl|wget)\b",
            re.M,
        ),
    ),
    (
        "destructive",
        "rm-root",
        ("rm ",),
        re.compile(
            rf"\brm\s+(?=[^\n;&|]*(?:(?<![\w-])-[a-zA-Z]*[rR]|--recursive|--no-preserve-root))"
            rf"(?:-{{1,2}}[\w-]+\s+)*(?:--no-preserve-root|{_RM_TARGET})"
        ),
    ),
    (
        "destructive",
        "format-disk",
        ("mkfs", "mke2fs", "mkswap", "wipefs"),
        re.compile(r"\b(?:mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs)\b[^\n]*?/dev/"),
    ),
    (
        "destructive",
        "write-to-device",
        ("/dev/",),
        re.compile(
            r"\bdd\b[^\n]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b|fd/|shm/)"
            r"|>\s*/dev/(?:sd[a-z]|nvme\d|hd[a-z]|vd[a-z]|xvd[a-z]|mmcblk\d|disk\d|mapper/)"
            r"|\bshred\b[^\n]*\s/dev/(?:sd|nvme|hd|vd|xvd|mmcblk|disk)"
        ),
    ),
    (
        "destructive",
        "fork-bomb",
        (":()", "(){", "() {"),
        re.compile(r"(\w+|:)\(\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}\s*;\s*\1"),
    ),
    (
        "destructive",
        "chmod-root",
        ("chmod", "chown"),
        re.compile(rf"\bch(?:mod|own)\s+(?:-\S+\s+)*-\w*R\w*\s+(?:-\S+\s+)*\S+\s+{_RM_TARGET}"),
    ),
]

_INLINE_CODE = {"sh": "c", "python": "cm", "perl": "eE", "ruby": "e", "node": "ep", "iex": ""}
"""Per interpreter, the option letters after which it runs code or a module given on the command line."""


def _runs_stdin(match: re.Match[str]) -> bool:
    """Whether the interpreter a download is piped into executes its stdin: alone or with options only
    (`| sh`, `| python3`), `-` or `-s` (`| python3 -`, `| bash -s -- --flag`); not with inline code or a
    script (`| python3 -c '...'`, `| bash script.sh`), where the download is only data."""
    word = match["interpreter"].split()[-1].rsplit("/", 1)[-1].lower()
    kind = next(k for k in _INLINE_CODE if word.startswith(k) or (k == "sh" and word.endswith("sh")))
    for raw in match["args"].split():
        token = raw.strip("\"'.,")
        if not token or token == "--" or token.startswith("--"):
            continue
        if re.match(r"\d*[<>]", token):
            break  # a redirection: the command's arguments ended
        if token == "-":
            return True
        if not token.startswith("-"):
            return False  # a script file: stdin is its data
        letters = set(token[1:])
        if letters & set(_INLINE_CODE[kind]):
            return False
        if kind == "sh" and "s" in letters:
            return True
    return True


_AUTH_HEADER = re.compile(
    r"(?:(?:-H|--header)\s*[\"']?(?:authorization|proxy-authorization|x-api-key|api-key|x-auth-token"
    r"|private-token|x-goog-api-key)\s*:[^\"'\n]*|(?:-u|--user)\s*[\"']?[^\s\"']*)$",
    re.I,
)
"""The end of a command line inside an authentication header or `--user` credentials."""
_GENERIC = frozenset(
    {
        *("api", "key", "keys", "token", "secret", "secrets", "password", "passwd", "access", "auth"),
        *("credential", "credentials", "private", "client", "id", "app"),
    }
)
"""Words of a secret's variable name that name no service."""


def _secret_destination(match: re.Match[str]) -> Severity:
    """A secret in a network command is HIGH, unless it is how the command signs in: in an
    authentication header, or sent to a host named like the variable (`$GITHUB_TOKEN` to api.github.com,
    `$GOOGLE_MAPS_API_KEY` to maps.googleapis.com): then LOW, the way documentation calls an API."""
    text = match.string
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start : end if end >= 0 else len(text)]
    if re.search(r"\$\(\s*(?:env|printenv|cat)\b|`\s*(?:env|printenv|cat)\b", line):
        return Severity.HIGH
    hosts = [host.lower() for host in re.findall(r"https?://([\w.-]+)", line)]
    for var in re.finditer(_SECRET_VAR, line):
        words = {w for w in re.findall(r"[a-z]+", var.group().lower()) if w not in _GENERIC}
        if not _AUTH_HEADER.search(line[: var.start()]) and not any(w in h for w in words for h in hosts):
            return Severity.HIGH
    return Severity.LOW


JUDGE: dict[str, Callable[[re.Match[str]], Severity | None]] = {
    "pipe-to-shell": lambda match: Severity.HIGH if _runs_stdin(match) else None,
    "network-send-secret": _secret_destination,
}
"""Rules whose match is judged by what it says: its severity, or None when it is no finding (the first
match judged a finding counts)."""
SEVERITY: dict[str, Severity] = {
    "network-upload-file": Severity.MEDIUM,  # uploading a file is what many APIs are for
    "read-secret-file": Severity.MEDIUM,  # `cat ~/.ssh/id_ed25519.pub` shows a public key
    "shell-rc-write": Severity.MEDIUM,  # `echo 'export PATH=...' >> ~/.bashrc` is ordinary setup
    "cron": Severity.MEDIUM,
    "systemd-unit": Severity.MEDIUM,  # `systemctl enable nginx`
    "autostart": Severity.MEDIUM,
    "zero-width": Severity.MEDIUM,  # soft hyphens and joiners come with text copied from the web
}
"""A rule's severity where the text is an instruction, when not HIGH."""
