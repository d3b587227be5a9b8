"""docs/any-client.md, "Python: plain redis-py": a purchase, the reply shapes and a fenced lock
without the seckill package. Run: python any_client.py PORT [cluster] (tests/any_client.rs
runs both)."""

import sys
import uuid

import redis

port, mode = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "single")
# socket_timeout longer than any LOCK.ACQUIRE ... WAIT: a caller that gives up first is told
# "failed" while the server may still grant it the lock. A cluster client finds a module
# command's key from COMMAND INFO, as for built-ins.
client = (redis.RedisCluster(host="127.0.0.1", port=port, socket_timeout=5) if mode == "cluster"
          else redis.Redis(host="127.0.0.1", port=port, socket_timeout=5))
sale, lock = "{py}:sale", "{py}:lock"
client.execute_command("SECKILL.INIT", sale, 10, "LIMIT", 2, "REPLACE")

# Always an attempt id: redis-py resends a command after a timeout or a lost connection
# (its default Retry), and a resend with the same ID is answered from the record.
attempt = uuid.uuid4().hex
left = client.execute_command("SECKILL.TRY", sale, "alice", 1, "ID", attempt)
assert client.execute_command("SECKILL.TRY", sale, "alice", 1, "ID", attempt) == left
assert client.execute_command("SECKILL.BOUGHT", sale, "alice") == 1

# BUYERS: one shape in RESP2 and RESP3. INFO: a dict under RESP3 (redis-py 8's default), a
# flat [name, value, ...] list under RESP2.
cursor, rows = client.execute_command("SECKILL.BUYERS", sale, 0)
assert (cursor, rows) == (b"0", [b"alice", 1, b"final"]), (cursor, rows)
info = client.execute_command("SECKILL.INFO", sale)
fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
assert fields[b"sold"] == 1

# Fences are Python ints: exact at any size (below 2^53 for JavaScript and Lua).
token = uuid.uuid4().hex
fence = client.execute_command("LOCK.ACQUIRE", lock, token, 10_000, "WAIT", 1_000)
assert client.execute_command("LOCK.RELEASE", lock, token) == 1
following = client.execute_command("LOCK.ACQUIRE", lock, token, 10_000)
assert following > fence and fence < 2**53
client.execute_command("LOCK.RELEASE", lock, token)
print(f"redis-py {redis.__version__} {mode}: bought, {left} left; fences {fence} < {following}")
