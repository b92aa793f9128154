"""The chaos run's nemesis: the consumer processes it controls, and one small function per fault type.

Each fault type has a ``begin`` and an ``end`` (``end`` undoes what ``begin`` did: heal a proxy, restart a
killed consumer, resume a paused one, put a clock back). They act through the public fault controls only:
``rxhubs.testing.FaultProxy`` (one per consumer toward the hub, one toward the store) and the emulator's
``faults`` (server-busy, forced close, stolen link, more partitions), and through signals to the processes.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rxhubs.chaos._plan import CONSUMERS, Fault


class Consumer:
    """One consumer's processes over the run: incarnation 1, 2... (a restart after a kill is a new owner)."""

    def __init__(self, name: str, out: Path, container: str, env: dict[str, str], log: Callable[..., None]) -> None:
        self.name, self.out, self.container, self.env, self.log = name, out, container, env, log
        self.incarnation = 0
        self.proc: subprocess.Popen[str] | None = None
        self.paused = False
        self.offset = 0.0

    def start(self) -> None:
        self.incarnation += 1
        label = f"{self.name}.{self.incarnation}"
        with open(self.out / f"consumer-{label}.log", "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rxhubs.chaos._worker", "--name", self.name, "--incarnation",
                 str(self.incarnation), "--ledger", str(self.out / f"ledger-{label}.jsonl"), "--container",
                 self.container],
                env={**os.environ, **self.env}, stdin=subprocess.PIPE, stdout=stderr, stderr=stderr, text=True,
            )
        self.paused, self.offset = False, 0.0
        self.log("start", self)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals, event: str) -> None:
        if self.proc is not None and self.alive:
            self.proc.send_signal(sig)
            self.log(event, self)

    def kill(self) -> None:
        self.signal(signal.SIGKILL, "kill")
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP, "stop")
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.signal(signal.SIGCONT, "cont")
            self.paused = False

    def skew(self, offset: float) -> None:
        if self.proc is not None and self.proc.stdin is not None and self.alive:
            self.proc.stdin.write(f"skew {offset}\n")
            self.proc.stdin.flush()
            self.offset = offset
            self.log("skew", self, offset=offset)

    async def terminate(self, timeout: float = 40.0) -> None:
        """Resume if paused, then SIGTERM (a graceful stop); kill -9 if it has not exited within ``timeout``.

        It waits without blocking the event loop: the proxies and the emulator serve the stop on it.
        """
        self.resume()
        if self.proc is None or not self.alive:
            return
        self.signal(signal.SIGTERM, "term")
        deadline = time.monotonic() + timeout
        while self.alive and time.monotonic() < deadline:  # noqa: ASYNC110 - polling a child process
            await asyncio.sleep(0.2)
        if self.alive:
            self.kill()


@dataclass
class Rig:
    """What the nemesis acts on."""

    emulator: Any
    hub: str
    hub_proxies: dict[str, Any]
    store_proxies: dict[str, Any]
    consumers: dict[str, Consumer]
    partitions: list[int] = field(default_factory=lambda: [4])  # the producer reads [-1]
    partitions_at: list[tuple[float, int]] = field(default_factory=list)


async def _maybe(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def _proxy(rig: Rig, fault: Fault) -> Any:
    proxies = rig.store_proxies if fault.type.startswith("store_") else rig.hub_proxies
    return proxies[str(fault.target)]


async def _heal(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).heal()


async def _silence(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).silence()


async def _blackhole(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).blackhole()


async def _reset(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).reset()


async def _latency(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).latency(1.0)


async def _bandwidth(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).bandwidth(20_000)


async def _slice(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).slice(1, 7)


async def _cut(rig: Rig, fault: Fault) -> Any:
    _proxy(rig, fault).cut_after(int(fault.params.get("after_bytes", 4096)))


async def _busy(rig: Rig, fault: Fault) -> Any:
    on = tuple(fault.params.get("on", ("attach", "flow", "management")))
    return await _maybe(rig.emulator.faults.server_busy(fault.end - fault.start, on=on, hub=rig.hub))


async def _force_close(rig: Rig, fault: Fault) -> Any:
    return await _maybe(rig.emulator.faults.force_close(hub=rig.hub))


async def _steal(rig: Rig, fault: Fault) -> Any:
    return await _maybe(rig.emulator.faults.steal(rig.hub, str(fault.params.get("partition", "0"))))


async def _promote(rig: Rig, fault: Fault) -> Any:
    return await _maybe(rig.emulator.faults.promote())


async def _grow(rig: Rig, fault: Fault) -> Any:
    count = int(fault.params.get("count", 6))
    result = await _maybe(rig.emulator.faults.add_partitions(rig.hub, count))
    rig.partitions.append(count)
    rig.partitions_at.append((time.time(), count))
    return result


async def _kill(rig: Rig, fault: Fault) -> Any:
    rig.consumers[str(fault.target)].kill()


async def _restart(rig: Rig, fault: Fault) -> Any:
    rig.consumers[str(fault.target)].start()


async def _pause(rig: Rig, fault: Fault) -> Any:
    rig.consumers[str(fault.target)].pause()


async def _resume(rig: Rig, fault: Fault) -> Any:
    rig.consumers[str(fault.target)].resume()


async def _skew(rig: Rig, fault: Fault) -> Any:
    rig.consumers[str(fault.target)].skew(float(fault.params.get("offset", 4.0)))


async def _unskew(rig: Rig, fault: Fault) -> Any:
    rig.consumers[str(fault.target)].skew(0.0)


async def _nothing(rig: Rig, fault: Fault) -> Any:
    return None


Action = Callable[[Rig, Fault], Awaitable[Any]]

#: fault type -> (begin, end)
ACTIONS: dict[str, tuple[Action, Action]] = {
    "hub_silent": (_silence, _heal), "hub_blackhole": (_blackhole, _heal), "hub_reset": (_reset, _heal),
    "hub_latency": (_latency, _heal), "hub_bandwidth": (_bandwidth, _heal), "hub_slice": (_slice, _heal),
    "hub_cut": (_cut, _heal), "store_silent": (_silence, _heal), "store_blackhole": (_blackhole, _heal),
    "server_busy": (_busy, _nothing), "force_close": (_force_close, _nothing), "steal": (_steal, _nothing),
    "partitions": (_grow, _nothing), "promote": (_promote, _nothing), "kill": (_kill, _restart),
    "zombie": (_pause, _resume),
    "skew": (_skew, _unskew),
}


async def heal_all(rig: Rig) -> None:
    """The end of the chaos phase: every proxy healed, every consumer running, resumed and on time."""
    for proxy in (*rig.hub_proxies.values(), *rig.store_proxies.values()):
        proxy.heal()
    for name in CONSUMERS:
        consumer = rig.consumers[name]
        consumer.resume()
        if not consumer.alive:
            consumer.start()
        elif consumer.offset:
            consumer.skew(0.0)
