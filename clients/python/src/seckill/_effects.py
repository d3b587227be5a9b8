"""Where the sale logic meets redis-py. Each operation is written once, as a generator that
yields what it needs done (a command, a sleep, a lock) and is sent the result, or thrown the
error; the sync classes run it on ``redis.Redis`` / ``redis.RedisCluster`` with :func:`run`,
the ``seckill.asyncio`` ones on the ``redis.asyncio`` clients with their own driver. So a
retry's backoff sleeps a thread in one and a task in the other, and nothing blocks a loop."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Tuple, TypeVar, Union, cast

import redis

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
class TryAndWait:
    """``args`` (a SECKILL.TRY) then ``WAIT replicas timeout_ms`` in one pipeline on one
    connection to the node that serves ``key`` (WAIT counts its own connection's writes);
    the result is ``(code, acked)``."""

    key: str
    args: Tuple[Any, ...]
    replicas: int
    timeout_ms: int


@dataclass(frozen=True)
class Acquire:
    """Takes ``lock`` (a ``threading.Lock`` in the sync classes, an ``asyncio.Lock`` in the
    async ones); without ``blocking``, only if free. The result: whether it was taken."""

    lock: Any
    blocking: bool


@dataclass(frozen=True)
class Release:
    lock: Any


Effect = Union[Call, Sleep, TryAndWait, Acquire, Release]
Operation = Generator[Effect, Any, T]


def call(client: Any, *args: Any) -> Any:
    """One command on a sync client, its server error as the package's type."""
    try:
        return client.execute_command(*args)
    except redis.exceptions.ResponseError as error:
        raise translate(error) from error


_topology_lock = threading.Lock()


def refresh_topology(client: Any) -> None:
    """After a node failed: ask the cluster for its slots again (a master killed, its replica
    promoted), one thread at a time; the others' retries use the new map."""
    if not isinstance(client, redis.RedisCluster) or not _topology_lock.acquire(blocking=False):
        return
    try:
        client.nodes_manager.initialize()
    except redis.exceptions.RedisError:
        pass  # no node answers yet: the retry waits and asks again
    finally:
        _topology_lock.release()


def try_and_wait(client: Any, effect: TryAndWait) -> Tuple[int, int]:
    for _ in range(5):
        if isinstance(client, redis.RedisCluster):
            target = cast(Any, client).get_node_from_key(effect.key).redis_connection
        else:
            target = client
        pipe = target.pipeline(transaction=False)
        pipe.execute_command(*effect.args)
        pipe.execute_command("WAIT", effect.replicas, effect.timeout_ms)
        try:
            code, acked = pipe.execute()
            return int(code), int(acked)
        except redis.exceptions.MovedError:
            # The key's slot moved: learn the new owners and send it there.
            client.nodes_manager.initialize()
        except redis.exceptions.AskError:
            # The key is being migrated right now: it lands on its new owner in a moment.
            time.sleep(0.01)
        except redis.exceptions.ResponseError as error:
            raise translate(error) from error
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            refresh_topology(client)
            raise
        except ValueError as error:
            # redis-py closed this node's connection under us (another thread refreshed the
            # topology): a lost connection like any other, so the purchase is retried.
            if "closed file" not in str(error):
                raise
            raise redis.exceptions.ConnectionError(str(error)) from error
    raise redis.exceptions.ClusterError(f"{effect.key} kept moving")


def perform(client: Any, effect: Effect) -> Any:
    if isinstance(effect, Call):
        return call(client, *effect.args)
    if isinstance(effect, Sleep):
        time.sleep(effect.seconds)
        return None
    if isinstance(effect, TryAndWait):
        return try_and_wait(client, effect)
    if isinstance(effect, Acquire):
        return effect.lock.acquire(blocking=effect.blocking)
    if isinstance(effect, Release):
        effect.lock.release()
        return None
    raise TypeError(f"unknown effect {effect!r}")


def run(operation: Operation[T], client: Any) -> T:
    """Runs ``operation`` to its end on the sync ``client``."""
    return drive(operation, lambda effect: perform(client, effect))


def drive(operation: Generator[Any, Any, T], perform_one: Callable[[Any], Any]) -> T:
    """Runs ``operation`` to its end, each effect it yields done by ``perform_one`` (its result
    sent back in, its error thrown in)."""
    reply: Any = None
    failure: BaseException | None = None
    while True:
        try:
            effect = operation.send(reply) if failure is None else operation.throw(failure)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        reply, failure = None, None
        try:
            reply = perform_one(effect)
        except BaseException as error:  # noqa: BLE001 - thrown into the operation
            failure = error
