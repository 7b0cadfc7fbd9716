"""The typed client of the runtime: one method per runtime call, its params and result the shapes
declared in `sandboxes/contract.py` and `sandboxes/contract_tools.py`. `Sandbox.runtime` gives it."""

from __future__ import annotations

from typing import Any, Protocol, Unpack, cast

from sandboxes import contract as c
from sandboxes import contract_tools as t

from .channel import NotifyFn


class Caller(Protocol):
    """What the client calls through: `Sandbox.call`, or a `Channel.call` as it is."""

    def __call__(
        self,
        method: c.Method,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
    ) -> Any: ...


class Runtime:
    """Calls into a sandbox's runtime. Params are keywords, as the runtime names them (what is left out
    gets the runtime's default); `call_timeout` is how long to wait for the answer (None: forever),
    `on_notify` receives the notifications a streaming call sends. Raises what `Sandbox.call` raises:
    RuntimeCallError, SandboxGone, CallTimeout."""

    def __init__(self, call: Caller) -> None:
        self._call = call

    def _ask(
        self, method: c.Method, params: Any, timeout: float | None, on_notify: NotifyFn | None = None
    ) -> Any:
        return self._call(
            method, dict(params) if params is not None else None, timeout=timeout, on_notify=on_notify
        )

    def sys_hello(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.SysHelloParams]
    ) -> c.SysHelloResult:
        return cast(c.SysHelloResult, self._ask("sys.hello", params, call_timeout))

    def sys_ping(self, *, call_timeout: float | None = 120.0) -> c.SysPingResult:
        return cast(c.SysPingResult, self._ask("sys.ping", None, call_timeout))

    def sys_info(self, *, call_timeout: float | None = 120.0) -> c.SysInfoResult:
        return cast(c.SysInfoResult, self._ask("sys.info", None, call_timeout))

    def sys_shutdown(self, *, call_timeout: float | None = 120.0) -> c.SysShutdownResult:
        return cast(c.SysShutdownResult, self._ask("sys.shutdown", None, call_timeout))

    def sys_stats(self, *, call_timeout: float | None = 120.0) -> c.SysStatsResult:
        return cast(c.SysStatsResult, self._ask("sys.stats", None, call_timeout))

    def shell_open(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ShellOpenParams]
    ) -> c.ShellOpenResult:
        return cast(c.ShellOpenResult, self._ask("shell.open", params, call_timeout))

    def shell_run(
        self,
        *,
        call_timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
        **params: Unpack[c.ShellRunParams],
    ) -> c.ShellRunResult:
        return cast(c.ShellRunResult, self._ask("shell.run", params, call_timeout, on_notify))

    def shell_send(
        self,
        *,
        call_timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
        **params: Unpack[c.ShellSendParams],
    ) -> c.ShellSendResult:
        return cast(c.ShellSendResult, self._ask("shell.send", params, call_timeout, on_notify))

    def shell_interrupt(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ShellInterruptParams]
    ) -> c.ShellInterruptResult:
        return cast(c.ShellInterruptResult, self._ask("shell.interrupt", params, call_timeout))

    def shell_close(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ShellCloseParams]
    ) -> c.ShellCloseResult:
        return cast(c.ShellCloseResult, self._ask("shell.close", params, call_timeout))

    def shell_list(self, *, call_timeout: float | None = 120.0) -> c.ShellListResult:
        return cast(c.ShellListResult, self._ask("shell.list", None, call_timeout))

    def shell_state(self, *, call_timeout: float | None = 120.0) -> c.ShellStateResult:
        return cast(c.ShellStateResult, self._ask("shell.state", None, call_timeout))

    def shell_restore(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ShellRestoreParams]
    ) -> c.ShellRestoreResult:
        return cast(c.ShellRestoreResult, self._ask("shell.restore", params, call_timeout))

    def proc_spawn(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ProcSpawnParams]
    ) -> c.ProcSpawnResult:
        return cast(c.ProcSpawnResult, self._ask("proc.spawn", params, call_timeout))

    def proc_poll(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ProcPollParams]
    ) -> c.ProcPollResult:
        return cast(c.ProcPollResult, self._ask("proc.poll", params, call_timeout))

    def proc_log(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ProcLogParams]
    ) -> c.ProcLogResult:
        return cast(c.ProcLogResult, self._ask("proc.log", params, call_timeout))

    def proc_wait(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ProcWaitParams]
    ) -> c.ProcWaitResult:
        return cast(c.ProcWaitResult, self._ask("proc.wait", params, call_timeout))

    def proc_write(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ProcWriteParams]
    ) -> c.ProcWriteResult:
        return cast(c.ProcWriteResult, self._ask("proc.write", params, call_timeout))

    def proc_attach(
        self,
        *,
        call_timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
        **params: Unpack[c.ProcAttachParams],
    ) -> c.ProcAttachResult:
        return cast(c.ProcAttachResult, self._ask("proc.attach", params, call_timeout, on_notify))

    def proc_kill(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.ProcKillParams]
    ) -> c.ProcKillResult:
        return cast(c.ProcKillResult, self._ask("proc.kill", params, call_timeout))

    def proc_list(self, *, call_timeout: float | None = 120.0) -> c.ProcListResult:
        return cast(c.ProcListResult, self._ask("proc.list", None, call_timeout))

    def fs_read(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsReadParams]
    ) -> c.FsReadResult:
        return cast(c.FsReadResult, self._ask("fs.read", params, call_timeout))

    def fs_write(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsWriteParams]
    ) -> c.FsWriteResult:
        return cast(c.FsWriteResult, self._ask("fs.write", params, call_timeout))

    def fs_patch(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsPatchParams]
    ) -> c.FsPatchResult:
        return cast(c.FsPatchResult, self._ask("fs.patch", params, call_timeout))

    def fs_list(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsListParams]
    ) -> c.FsListResult:
        return cast(c.FsListResult, self._ask("fs.list", params, call_timeout))

    def fs_stat(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsStatParams]
    ) -> c.FsStatResult:
        return cast(c.FsStatResult, self._ask("fs.stat", params, call_timeout))

    def fs_search(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsSearchParams]
    ) -> c.FsSearchResult:
        return cast(c.FsSearchResult, self._ask("fs.search", params, call_timeout))

    def fs_upload(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsUploadParams]
    ) -> c.FsUploadResult:
        return cast(c.FsUploadResult, self._ask("fs.upload", params, call_timeout))

    def fs_fingerprint(self, *, call_timeout: float | None = 120.0) -> c.FsFingerprintResult:
        return cast(c.FsFingerprintResult, self._ask("fs.fingerprint", None, call_timeout))

    def fs_download(
        self,
        *,
        call_timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
        **params: Unpack[c.FsDownloadParams],
    ) -> c.FsDownloadResult:
        return cast(c.FsDownloadResult, self._ask("fs.download", params, call_timeout, on_notify))

    def fs_watch(
        self,
        *,
        call_timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
        **params: Unpack[c.FsWatchParams],
    ) -> c.FsWatchResult:
        return cast(c.FsWatchResult, self._ask("fs.watch", params, call_timeout, on_notify))

    def fs_unwatch(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[c.FsUnwatchParams]
    ) -> c.FsUnwatchResult:
        return cast(c.FsUnwatchResult, self._ask("fs.unwatch", params, call_timeout))

    def browser_navigate(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserNavigateParams]
    ) -> t.BrowserNavigateResult:
        return cast(t.BrowserNavigateResult, self._ask("browser.navigate", params, call_timeout))

    def browser_snapshot(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserSnapshotParams]
    ) -> t.BrowserSnapshotResult:
        return cast(t.BrowserSnapshotResult, self._ask("browser.snapshot", params, call_timeout))

    def browser_click(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserClickParams]
    ) -> t.BrowserClickResult:
        return cast(t.BrowserClickResult, self._ask("browser.click", params, call_timeout))

    def browser_type(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserTypeParams]
    ) -> t.BrowserTypeResult:
        return cast(t.BrowserTypeResult, self._ask("browser.type", params, call_timeout))

    def browser_press(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserPressParams]
    ) -> t.BrowserPressResult:
        return cast(t.BrowserPressResult, self._ask("browser.press", params, call_timeout))

    def browser_select(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserSelectParams]
    ) -> t.BrowserSelectResult:
        return cast(t.BrowserSelectResult, self._ask("browser.select", params, call_timeout))

    def browser_scroll(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserScrollParams]
    ) -> t.BrowserScrollResult:
        return cast(t.BrowserScrollResult, self._ask("browser.scroll", params, call_timeout))

    def browser_back(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserBackParams]
    ) -> t.BrowserBackResult:
        return cast(t.BrowserBackResult, self._ask("browser.back", params, call_timeout))

    def browser_screenshot(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserScreenshotParams]
    ) -> t.BrowserScreenshotResult:
        return cast(t.BrowserScreenshotResult, self._ask("browser.screenshot", params, call_timeout))

    def browser_console(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserConsoleParams]
    ) -> t.BrowserConsoleResult:
        return cast(t.BrowserConsoleResult, self._ask("browser.console", params, call_timeout))

    def browser_evaluate(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserEvaluateParams]
    ) -> t.BrowserEvaluateResult:
        return cast(t.BrowserEvaluateResult, self._ask("browser.evaluate", params, call_timeout))

    def browser_close(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.BrowserCloseParams]
    ) -> t.BrowserCloseResult:
        return cast(t.BrowserCloseResult, self._ask("browser.close", params, call_timeout))

    def term_open(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.TermOpenParams]
    ) -> t.TermOpenResult:
        return cast(t.TermOpenResult, self._ask("term.open", params, call_timeout))

    def term_send(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.TermSendParams]
    ) -> t.TermSendResult:
        return cast(t.TermSendResult, self._ask("term.send", params, call_timeout))

    def term_resize(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.TermResizeParams]
    ) -> t.TermResizeResult:
        return cast(t.TermResizeResult, self._ask("term.resize", params, call_timeout))

    def term_close(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.TermCloseParams]
    ) -> t.TermCloseResult:
        return cast(t.TermCloseResult, self._ask("term.close", params, call_timeout))

    def term_list(self, *, call_timeout: float | None = 120.0) -> t.TermListResult:
        return cast(t.TermListResult, self._ask("term.list", None, call_timeout))

    def script_start(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.ScriptStartParams]
    ) -> t.ScriptStartResult:
        return cast(t.ScriptStartResult, self._ask("script.start", params, call_timeout))

    def script_reply(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.ScriptReplyParams]
    ) -> t.ScriptReplyResult:
        return cast(t.ScriptReplyResult, self._ask("script.reply", params, call_timeout))

    def script_cancel(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.ScriptCancelParams]
    ) -> t.ScriptCancelResult:
        return cast(t.ScriptCancelResult, self._ask("script.cancel", params, call_timeout))

    def kernel_run(
        self, *, call_timeout: float | None = 120.0, **params: Unpack[t.KernelRunParams]
    ) -> t.KernelRunResult:
        return cast(t.KernelRunResult, self._ask("kernel.run", params, call_timeout))

    def kernel_restart(self, *, call_timeout: float | None = 120.0) -> t.KernelRestartResult:
        return cast(t.KernelRestartResult, self._ask("kernel.restart", None, call_timeout))

    def kernel_shutdown(self, *, call_timeout: float | None = 120.0) -> t.KernelShutdownResult:
        return cast(t.KernelShutdownResult, self._ask("kernel.shutdown", None, call_timeout))
