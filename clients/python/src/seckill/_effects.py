"""Where the sale logic meets redis-py. Each operation is written once, as a generator that
yields what it needs done (a command, a command on the package's own connection to a key's
master: ``NodeCall``, a sleep, a lock) and is sent the result, or thrown the error; the sync
classes run it on ``redis.Redis`` / ``redis.RedisCluster`` with :func:`run`, the
``seckill.asyncio`` ones on the ``redis.asyncio`` clients with their own driver. So a
retry's backoff sleeps a thread in one and a task in the other, and nothing blocks a loop."""

from __future__ import annotations

import time
from dataclasses import dataclass
from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Generator, Tuple, TypeVar, Union

import redis

from ._node import CLUSTER_CLIENT_SLIPS, LOST_CONNECTION, NodeCall, READ_SENDS, lost_node, nodes_of, read_backoff_s, resend_read, slipped
from .errors import translate

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """A command; the result is its reply (server errors thrown as the package's types)."""

    args: Tuple[Any, ...]


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Acquire:
    """Takes ``lock`` (a ``threading.Lock`` in the sync classes, an ``asyncio.Lock`` in the
    async ones); without ``blocking``, only if free. The result: whether it was taken."""

    lock: Any
    blocking: bool


@dataclass(frozen=True)
class Release:
    lock: Any


Effect = Union[Call, Sleep, NodeCall, Acquire, Release]
Operation = Generator[Effect, Any, T]


def call(client: Any, *args: Any) -> Any:
    """One command on a sync client, its server error as the package's type; a read the
    cluster client failed on (see ``resend_read``) is sent again (up to ``READ_SENDS`` sends)."""
    for attempt in range(READ_SENDS):
        try:
            return client.execute_command(*args)
        except redis.exceptions.ResponseError as error:
            raise translate(error) from error
        except (*CLUSTER_CLIENT_SLIPS, *LOST_CONNECTION) as error:
            if not isinstance(client, redis.RedisCluster) or not resend_read(error, args, attempt):
                if isinstance(error, CLUSTER_CLIENT_SLIPS) and slipped(error):
                    raise lost_node(error) from error
                raise
            nodes_of(client).refresh_topology()
            time.sleep(read_backoff_s(attempt))
    raise AssertionError("unreachable")


def perform(client: Any, effect: Effect) -> Any:
    if isinstance(effect, Call):
        return call(client, *effect.args)
    if isinstance(effect, Sleep):
        time.sleep(effect.seconds)
        return None
    if isinstance(effect, NodeCall):
        return nodes_of(client).perform(effect)
    if isinstance(effect, Acquire):
        return effect.lock.acquire(blocking=effect.blocking)
    if isinstance(effect, Release):
        effect.lock.release()
        return None
    raise TypeError(f"unknown effect {effect!r}")


def check_client(client: Any, asyncio: bool) -> None:
    """TypeError for a client of the other API: a ``redis.asyncio`` one given to the sync
    classes, or a sync one given to ``seckill.asyncio`` (which would fail later, with an
    AttributeError about a coroutine, or an ``await`` on a dict)."""
    import redis.asyncio

    if asyncio and isinstance(client, (redis.Redis, redis.RedisCluster)):
        raise TypeError(f"seckill.asyncio needs a redis.asyncio client (Redis or RedisCluster), not "
                        f"{type(client).__module__}.{type(client).__name__}: use seckill's sync classes for it")
    if not asyncio and isinstance(client, (redis.asyncio.Redis, redis.asyncio.RedisCluster)):
        raise TypeError(f"seckill's sync classes need a sync client (redis.Redis or RedisCluster), not "
                        f"{type(client).__module__}.{type(client).__name__}: use seckill.asyncio for it")


def run(operation: Operation[T], client: Any) -> T:
    """Runs ``operation`` to its end on the sync ``client``."""
    check_client(client, asyncio=False)
    return drive(operation, lambda effect: perform(client, effect))


def drive(operation: Generator[Any, Any, T], perform_one: Callable[[Any], Any],
          held: ContextManager[Any] = nullcontext()) -> T:
    """Runs ``operation`` to its end, each effect it yields done by ``perform_one`` (its result
    sent back in, its error thrown in). ``held`` (a lock) is held while the operation's own
    code runs and released while an effect is done: other threads read the state it changes."""
    reply: Any = None
    failure: BaseException | None = None
    while True:
        with held:
            try:
                effect = operation.send(reply) if failure is None else operation.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        reply, failure = None, None
        try:
            reply = perform_one(effect)
        except BaseException as error:  # noqa: BLE001 - thrown into the operation
            failure = error
