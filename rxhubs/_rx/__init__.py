"""The async kernel: coroutines as one-shot Observables, and a clock that also runs in virtual time.

* :func:`from_coroutine` runs a coroutine on the subscribing scheduler: an asyncio task under
  ``rxhubs.run``, a stepper on the scheduler's clock under ``TestScheduler``.
* :func:`now`, :func:`sleep`, :func:`never`, :class:`Signal` and :func:`deadline` are what such a coroutine
  awaits instead of asyncio's own, so the same code waits in real and in virtual time.
"""

from __future__ import annotations

from rxhubs._rx._clock import Signal, deadline, never, now, sleep, to_thread
from rxhubs._rx._driver import from_coroutine, pipeline_scheduler

__all__ = ["Signal", "deadline", "from_coroutine", "never", "now", "pipeline_scheduler", "sleep", "to_thread"]
