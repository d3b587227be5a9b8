"""Where a request's time goes: Redis calls, the order database and the payment provider,
reported in the ``Server-Timing`` response header (a browser's developer tools show it; the
shop's benchmark adds it up). A context variable per request; the parts are wrapped once."""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from typing import Any, Callable, Dict, Optional

#: Seconds spent per part in the current request (None outside a request).
spent: contextvars.ContextVar[Optional[Dict[str, float]]] = contextvars.ContextVar("spent", default=None)


def begin() -> Dict[str, float]:
    parts: Dict[str, float] = {}
    spent.set(parts)
    return parts


def header(parts: Dict[str, float], total_s: float) -> str:
    timings = [f"{name};dur={seconds * 1000:.2f}" for name, seconds in sorted(parts.items())]
    return ", ".join([*timings, f"total;dur={total_s * 1000:.2f}"])


class Timed:
    """``target`` with its coroutine methods timed under ``part``; anything else as it is."""

    def __init__(self, target: Any, part: str) -> None:
        self._target, self._part = target, part

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._target, name)
        if not inspect.iscoroutinefunction(found):
            return found
        timed = _timed(found, self._part)
        # Kept: the next call finds it here, without building the wrapper again.
        setattr(self, name, timed)
        return timed


def _timed(call: Callable[..., Any], part: str) -> Callable[..., Any]:
    @functools.wraps(call)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            parts = spent.get()
            if parts is not None:
                parts[part] = parts.get(part, 0.0) + time.perf_counter() - began

    return timed
