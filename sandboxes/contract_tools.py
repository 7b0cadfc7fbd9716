"""The calls behind the agent's interactive tools, declared as `sandboxes/contract.py` declares the
runtime's core ones: browser, terminals, scripts (execute_code) and the python kernel."""

from typing import Any, Literal, Optional, TypedDict, Union

from .contract import NoParams, NotRequired

# -- browser -------------------------------------------------------------------------------


class BrowserPage(TypedDict):
    """Where the page is after an action."""

    url: str
    title: str


class BrowserSessionParams(TypedDict):
    session: NotRequired[str]


class BrowserNavigateParams(TypedDict):
    url: str
    session: NotRequired[str]
    timeout: NotRequired[float]


class BrowserSnapshotResult(BrowserPage):
    snapshot: str
    """The page's accessibility tree, each element that can be acted on with its `ref`."""
    truncated: bool


class BrowserNavigateResult(BrowserSnapshotResult):
    status: Optional[int]


BrowserSnapshotParams = BrowserSessionParams


class BrowserClickParams(TypedDict):
    ref: str
    session: NotRequired[str]
    timeout: NotRequired[float]


BrowserClickResult = BrowserPage


class BrowserTypeParams(TypedDict):
    ref: str
    text: str
    submit: NotRequired[bool]
    session: NotRequired[str]
    timeout: NotRequired[float]


BrowserTypeResult = BrowserPage


class BrowserPressParams(TypedDict):
    key: str
    ref: NotRequired[Optional[str]]
    session: NotRequired[str]
    timeout: NotRequired[float]


BrowserPressResult = BrowserPage


class BrowserSelectParams(TypedDict):
    ref: str
    values: Union[str, list[str]]
    session: NotRequired[str]
    timeout: NotRequired[float]


class BrowserSelectResult(BrowserPage):
    selected: list[str]


class BrowserScrollParams(TypedDict):
    direction: NotRequired[str]
    amount: NotRequired[Optional[int]]
    ref: NotRequired[Optional[str]]
    session: NotRequired[str]


class BrowserScrollResult(TypedDict):
    scroll_x: float
    scroll_y: float
    page_height: float
    page_width: float


class BrowserBackParams(TypedDict):
    session: NotRequired[str]
    timeout: NotRequired[float]


class BrowserBackResult(BrowserPage):
    moved: bool


class BrowserScreenshotParams(TypedDict):
    full_page: NotRequired[bool]
    session: NotRequired[str]


class BrowserScreenshotResult(TypedDict):
    png: str
    """base64"""
    width: int
    height: int
    bytes: int
    clipped: bool


class BrowserConsoleParams(TypedDict):
    clear: NotRequired[bool]
    session: NotRequired[str]


class BrowserConsoleResult(TypedDict):
    messages: list[dict[str, Any]]
    dropped: int


class BrowserEvaluateParams(TypedDict):
    expression: str
    session: NotRequired[str]


class BrowserEvaluateResult(TypedDict):
    value: Any
    truncated: bool


BrowserCloseParams = BrowserSessionParams


class BrowserCloseResult(TypedDict):
    closed: bool


# -- terminals -----------------------------------------------------------------------------


class TermOpenParams(TypedDict):
    command: str
    rows: NotRequired[int]
    cols: NotRequired[int]
    cwd: NotRequired[Optional[str]]
    settle: NotRequired[float]
    timeout: NotRequired[float]


class TermRead(TypedDict):
    """The terminal's output past the offset asked for (base64 `data`), once it settled."""

    id: str
    data: str
    offset: int
    dropped_bytes: int
    running: bool
    exit_code: Optional[int]
    rows: int
    cols: int


TermOpenResult = TermRead


class TermSendParams(TypedDict):
    id: str
    data: NotRequired[str]
    offset: NotRequired[int]
    settle: NotRequired[float]
    timeout: NotRequired[float]
    until_exit: NotRequired[bool]


TermSendResult = TermRead


class TermResizeParams(TypedDict):
    id: str
    rows: int
    cols: int


class TermStatus(TypedDict):
    id: str
    pid: int
    command: str
    running: bool
    exit_code: Optional[int]
    rows: int
    cols: int
    started: float


TermResizeResult = TermStatus


class TermCloseParams(TypedDict):
    id: str


TermCloseResult = TermStatus
TermListParams = NoParams


class TermListResult(TypedDict):
    terminals: list[TermStatus]


# -- scripts (execute_code) ----------------------------------------------------------------


class CallEvent(TypedDict):
    """script.start / script.reply answer: the script calls a tool and waits for its result."""

    event: Literal["call"]
    run: str
    name: str
    arguments: dict[str, Any]


class DoneEvent(TypedDict):
    """script.start / script.reply answer: the script has ended (its process and what it started)."""

    event: Literal["done"]
    run: str
    output: str
    truncated: bool
    exit_code: Optional[int]
    timed_out: bool
    cancelled: bool
    problem: str
    """Why the runtime stopped it, when the script broke the stub's protocol; else empty."""


class CallReply(TypedDict, total=False):
    """script.reply's `result`: what the script's call returns (or raises: refused, spent)."""

    ok: bool
    content: str
    exit_code: Optional[int]
    spent: bool
    refused: bool


class ScriptStartParams(TypedDict):
    script: str
    tools: NotRequired[Optional[dict[str, Any]]]
    """Each tool the script may call, with its parameter names (for positional use)."""
    timeout: NotRequired[float]
    limit: NotRequired[int]
    cwd: NotRequired[Optional[str]]


ScriptStartResult = Union[CallEvent, DoneEvent]


class ScriptReplyParams(TypedDict):
    run: str
    result: CallReply


ScriptReplyResult = Union[CallEvent, DoneEvent]


class ScriptCancelParams(TypedDict):
    run: NotRequired[Optional[str]]
    """One run; without it, every run."""


class ScriptCancelResult(TypedDict):
    cancelled: int


# -- the python kernel ---------------------------------------------------------------------


class KernelRunParams(TypedDict):
    code: str
    timeout: NotRequired[float]
    figures: NotRequired[str]


class KernelRunResult(TypedDict):
    status: str
    """ok, error, timeout or died"""
    outputs: list[dict[str, Any]]
    execution_count: Optional[int]
    started: bool
    """The kernel was started for this cell."""


KernelRestartParams = NoParams


class KernelRestartResult(TypedDict):
    restarted: bool


KernelShutdownParams = NoParams


class KernelShutdownResult(TypedDict):
    stopped: bool
