"""docs/any-client.md, "Python: Valkey GLIDE": a purchase, a position read from a replica and a
fenced lock through valkey-glide (asyncio). Run: python glide_client.py PORT [cluster]
(tests/any_client.rs runs both; its cluster has a replica per master)."""

import asyncio
import sys
import uuid

from glide import (GlideClient, GlideClientConfiguration, GlideClusterClient, GlideClusterClientConfiguration,
                   LogLevel, Logger, NodeAddress, ReadFrom, RequestError, SlotKeyRoute, SlotType)

port, mode = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "single")
# GLIDE logs every error reply (the refusals below) as a warning on stdout unless told.
Logger.set_logger_config(LogLevel.ERROR)


async def connect():
    # request_timeout (ms) longer than any LOCK.ACQUIRE ... WAIT (rule 2). In a cluster GLIDE
    # routes a custom command to its first key's master; PREFER_REPLICA opens READONLY
    # connections to the replicas, which a SlotKeyRoute(REPLICA) read then uses.
    address = [NodeAddress("127.0.0.1", port)]
    if mode == "cluster":
        return await GlideClusterClient.create(
            GlideClusterClientConfiguration(address, request_timeout=5_000, read_from=ReadFrom.PREFER_REPLICA))
    return await GlideClient.create(GlideClientConfiguration(address, request_timeout=5_000))


async def main() -> None:
    client = await connect()
    sale, room, lock = "{glide}:sale", "{glide}:room", "{glide}:lock"
    await client.custom_command(["SECKILL.INIT", sale, "10", "LIMIT", "2", "REPLACE"])

    # Always an attempt id: GLIDE reconnects and resends on its own, and a resend with the same
    # ID is answered from the record.
    attempt = uuid.uuid4().hex
    left = await client.custom_command(["SECKILL.TRY", sale, "alice", "1", "ID", attempt])
    assert await client.custom_command(["SECKILL.TRY", sale, "alice", "1", "ID", attempt]) == left
    assert await client.custom_command(["SECKILL.BOUGHT", sale, "alice"]) == 1

    # GLIDE rewrites error texts: a module error keeps its code ("NOSALE: no sale ..."), an ERR
    # loses it ("... ResponseError: qty must be ..."). Match on the module's words.
    try:
        await client.custom_command(["SECKILL.TRY", "{glide}:none", "alice"])
    except RequestError as error:
        assert str(error).startswith("NOSALE"), error
    try:
        await client.custom_command(["SECKILL.TRY", sale, "alice", "0"])
    except RequestError as error:
        assert "qty must be" in str(error), error

    # A position from a replica in a cluster (what waiting pages poll): the JOIN on the master,
    # WAIT for its replica, then a read routed to the slot's replica.
    await client.custom_command(["SECKILL.INIT", room, "10", "QUEUE", "REPLACE"])
    await client.custom_command(["SECKILL.JOIN", room, "bob"])
    if mode == "cluster":
        await client.custom_command(["WAIT", "1", "1000"], route=SlotKeyRoute(SlotType.PRIMARY, room))
        place = await client.custom_command(["SECKILL.POSITION", room, "bob"],
                                            route=SlotKeyRoute(SlotType.REPLICA, room))
    else:
        place = await client.custom_command(["SECKILL.POSITION", room, "bob"])
    assert place == 1, place

    # GLIDE multiplexes one connection per node: a blocking LOCK.ACQUIRE ... WAIT holds every
    # call queued behind it (rule 3), so it gets a client of its own.
    locker = await connect()
    token = uuid.uuid4().hex
    fence = await locker.custom_command(["LOCK.ACQUIRE", lock, token, "10000", "WAIT", "1000"])
    assert await locker.custom_command(["LOCK.RELEASE", lock, token]) == 1
    following = await locker.custom_command(["LOCK.ACQUIRE", lock, token, "10000"])
    assert following > fence and fence < 2**53
    await locker.custom_command(["LOCK.RELEASE", lock, token])
    print(f"valkey-glide {mode}: bought, {left} left; place {place}; fences {fence} < {following}")
    await locker.close()
    await client.close()


asyncio.run(main())
