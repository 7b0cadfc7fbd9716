"""The office platforms' rows of `python -m bench.gateway`: for each, the gateway with its real client
library against the suite's stand-in (tests/standins/*_standin.py) and the scripted model, N chats x M
messages at once (each chat sends its next message when the last answer is in): the time from the platform
receiving a user's message to the agent's first model request for it. The stand-in and the model run in a
process of their own (bench/far_side.py), as a deployment has them, unless asked to share the gateway's.
The note adds this process's CPU time per message over the run (the gateway's, with the far side in its
own process): a figure the machine's load moves far less than the latencies."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway

from .far_side import PLATFORMS, far_side, now
from .stats import Figure, Results

REPLY = "Here is the answer you asked for, written out over a few words, done."


def _answered(gateway: Any) -> tuple[dict[str, int], threading.Condition]:
    """Answers counted per chat as the gateway marks them (the store's mark, wrapped)."""
    done: dict[str, int] = {}
    changed = threading.Condition()
    store, mark = gateway.store, gateway.store.mark

    def marked(inbound_id: int, **fields: Any) -> None:
        mark(inbound_id, **fields)
        if fields.get("state") == "answered":
            found = store.inbound(inbound_id)
            with changed:
                key = found.chat if found else "?"
                done[key] = done.get(key, 0) + 1
                changed.notify_all()

    store.mark = marked
    return done, changed


def collect_one(name: str, chats: int, messages: int, *, own_process: bool = True) -> Figure:
    platform = PLATFORMS[name]
    users = [f"u{n}" for n in range(chats)]
    with (
        tempfile.TemporaryDirectory(prefix=f"hm-bench-{name}-") as tmp,
        far_side(name, chats * messages + 5, REPLY, own_process=own_process) as far,
    ):
        settings = load_settings(
            root=Path(tmp), model=far.model(), backend="local", learning={"enabled": False},
            gateway={name: far.config(users)},
        )  # fmt: skip
        gateway = create_gateway(settings)
        done, changed = _answered(gateway)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(60)
        sent: dict[str, float] = {}
        try:
            far.ready()

            def wait(chat: str, count: int) -> None:
                with changed:
                    if not changed.wait_for(lambda: done.get(chat, 0) >= count, timeout=120):
                        raise TimeoutError(f"{name} chat {chat}: {count} answers never came")

            far.say(0, "warm up")  # the first turn pays one-time imports: not sampled
            wait(platform.chat(0), 1)

            def chat(n: int) -> None:
                for k in range(1, messages + 1):
                    text = f"chat {n} message {k}"
                    sent[text] = now()
                    far.say(n, text)
                    wait(platform.chat(n), k + (n == 0))

            workers = [threading.Thread(target=chat, args=(n,)) for n in range(chats)]
            cpu = time.process_time()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            cpu = time.process_time() - cpu
            latencies = far.to_model(sent)
        finally:
            asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            gateway.agent.close()
            gateway.store.close()
    where = "stand-in and model in their own process" if own_process else "all in the gateway's process"
    per_message = 1000 * cpu / (chats * messages)
    note = (
        f"{chats} chats x {messages} messages; {where}; {per_message:.1f} ms of this process's CPU a message"
    )
    return Figure(latencies, note=note, extra={"cpu_ms_per_message": per_message})


def collect(chats: int, messages: int, names: list[str], *, own_process: bool = True) -> Results:
    return {
        f"gateway {name}: inbound -> first model request": collect_one(
            name, chats, messages, own_process=own_process
        )
        for name in names
    }
