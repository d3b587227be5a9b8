// docs/any-client.md, "Node.js: ioredis": a purchase, the reply shapes and a fenced lock.
// Run: node ioredis.mjs PORT [cluster]   (tests/any_client.rs runs both)
import Redis from "ioredis";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

const [port, mode] = process.argv.slice(2);
// commandTimeout longer than any LOCK.ACQUIRE ... WAIT below: a caller that gives up first is
// told "failed" while the server may still grant it the lock (held until its TTL).
const options = { commandTimeout: 5000 };
const redis = mode === "cluster"
  ? new Redis.Cluster([{ host: "127.0.0.1", port: Number(port) }], { redisOptions: options })
  : new Redis({ port: Number(port), ...options });

// Keys of one call share a hash tag: a cluster client sends them to one master.
const sale = "{node-ioredis}:sale";
const lock = "{node-ioredis}:lock";
await redis.call("SECKILL.INIT", sale, 10, "LIMIT", 2, "REPLACE");

// A purchase always carries an attempt id: ioredis resends a command whose reply was lost
// when it reconnects, and a resend with the same ID is answered from the record.
const attempt = randomUUID();
const left = await redis.call("SECKILL.TRY", sale, "alice", 1, "ID", attempt);
assert.equal(await redis.call("SECKILL.TRY", sale, "alice", 1, "ID", attempt), left);
assert.equal(await redis.call("SECKILL.BOUGHT", sale, "alice"), 1);

// One shape in RESP2 and RESP3 (ioredis 6 speaks RESP3 and flattens maps by default).
const [cursor, rows] = await redis.call("SECKILL.BUYERS", sale, 0);
assert.deepEqual([cursor, rows], ["0", ["alice", 1, "final"]]);
const info = await redis.call("SECKILL.INFO", sale);
const fields = Object.fromEntries(info.flatMap((v, i) => (i % 2 ? [] : [[v, info[i + 1]]])));
assert.equal(fields.sold, 1);

// A fenced lock: fences are below 2^53, exact as JavaScript numbers.
const token = randomUUID();
const fence = await redis.call("LOCK.ACQUIRE", lock, token, 10_000, "WAIT", 1_000);
assert.ok(Number.isSafeInteger(fence));
assert.equal(await redis.call("LOCK.RELEASE", lock, token), 1);
const next = await redis.call("LOCK.ACQUIRE", lock, token, 10_000);
assert.ok(next > fence);
await redis.call("LOCK.RELEASE", lock, token);

console.log(`ioredis ${mode ?? "single"}: bought, ${left} left; fences ${fence} < ${next}`);
redis.disconnect();
