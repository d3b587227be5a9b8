// docs/any-client.md, "Node.js: node-redis": a purchase, the reply shapes and a fenced lock.
// Run: node node_redis.mjs PORT [cluster]   (tests/any_client.rs runs both)
import { createClient, createCluster } from "redis";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

const [port, mode] = process.argv.slice(2);
const url = `redis://127.0.0.1:${port}`;
const client = mode === "cluster"
  ? createCluster({ rootNodes: [{ url }] })
  : createClient({ url });
await client.connect();
// A cluster client routes by the key it is given: node-redis does not read COMMAND INFO.
const send = (key, args) => mode === "cluster"
  ? client.sendCommand(key, false, args)
  : client.sendCommand(args);

const sale = "{node-redis}:sale";
const lock = "{node-redis}:lock";
await send(sale, ["SECKILL.INIT", sale, "10", "LIMIT", "2", "REPLACE"]);

// Always an attempt id: a resend or a retry is answered from the record, never run twice.
const attempt = randomUUID();
const left = await send(sale, ["SECKILL.TRY", sale, "alice", "1", "ID", attempt]);
assert.equal(await send(sale, ["SECKILL.TRY", sale, "alice", "1", "ID", attempt]), left);
assert.equal(await send(sale, ["SECKILL.BOUGHT", sale, "alice"]), 1);

// BUYERS has one shape in RESP2 and RESP3; INFO is a map: node-redis 6 speaks RESP3 and hands
// it over as an object (sold_out a boolean), under RESP2 as a flat [name, value, ...] array.
const [cursor, rows] = await send(sale, ["SECKILL.BUYERS", sale, "0"]);
assert.deepEqual([cursor, rows], ["0", ["alice", 1, "final"]]);
const info = await send(sale, ["SECKILL.INFO", sale]);
const fields = Array.isArray(info)
  ? Object.fromEntries(info.flatMap((v, i) => (i % 2 ? [] : [[v, info[i + 1]]])))
  : info;
assert.equal(Number(fields.sold), 1);

// LOCK.ACQUIRE ... WAIT blocks its connection in the server: run it on a connection of its
// own, or every command queued behind it on the shared one waits too.
const waiting = client.duplicate();
await waiting.connect();
const token = randomUUID();
const acquire = (args) => mode === "cluster"
  ? waiting.sendCommand(lock, false, args)
  : waiting.sendCommand(args);
const fence = await acquire(["LOCK.ACQUIRE", lock, token, "10000", "WAIT", "1000"]);
assert.ok(Number.isSafeInteger(fence)); // below 2^53: exact as a JavaScript number
assert.equal(await send(lock, ["LOCK.RELEASE", lock, token]), 1);
const next = await acquire(["LOCK.ACQUIRE", lock, token, "10000"]);
assert.ok(next > fence);
await send(lock, ["LOCK.RELEASE", lock, token]);

console.log(`node-redis ${mode ?? "single"}: bought, ${left} left; fences ${fence} < ${next}`);
await waiting.close();
await client.close();
