// docs/any-client.md, "Pitfalls", shown with real faults through ioredis. Run: node hazards.mjs PORT
// 1. A lost reply, resent on reconnect: the server ran SECKILL.TRY, its reply is dropped
//    (nftables, loopback only), the connection is cut (ss -K); ioredis reconnects and sends
//    the TRY again. Without ID the user owns 2; with ID, 1 (the resend is answered from the
//    record). Needs root; every rule is removed at the end.
// 2. A ghost lock: a commandTimeout shorter than LOCK.ACQUIRE's WAIT tells the caller "failed"
//    while the server still hands it the lock, held until its TTL.
import Redis from "ioredis";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

const port = Number(process.argv[2]);
const observer = new Redis({ port });
const TABLE = `seckill_recipes_${process.pid}`;
const nft = (...args) => execFileSync("nft", args);

async function until(what, condition) {
  for (const started = Date.now(); !(await condition()); ) {
    if (Date.now() - started > 10_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// Units `user` owns after one TRY whose first reply was lost.
async function ownedAfterLostReply(sale, user, id) {
  const buyer = new Redis({ port }); // autoResendUnfulfilledCommands: true, the default
  buyer.on("error", () => {}); // the cut connection's ECONNABORTED: this demonstration's fault
  await buyer.ping();
  const local = buyer.stream.localPort;
  nft("add", "rule", "inet", TABLE, "out", "ip", "saddr", "127.0.0.1", "tcp", "sport", `${port}`,
    "tcp", "dport", `${local}`, "drop");
  const reply = buyer.call("SECKILL.TRY", sale, user, 1, ...(id ? ["ID", id] : []));
  await until("the server to run the TRY", async () => (await observer.call("SECKILL.BOUGHT", sale, user)) === 1);
  execFileSync("ss", ["-K", "-t", "src", "127.0.0.1", "sport", "=", `:${local}`, "dport", "=", `:${port}`]);
  await reply; // answered by the resend, on the new connection
  buyer.disconnect();
  return observer.call("SECKILL.BOUGHT", sale, user);
}

if (process.getuid() === 0) {
  nft("add", "table", "inet", TABLE);
  try {
    nft("add", "chain", "inet", TABLE, "out", "{ type filter hook output priority 0 ; }");
    const sale = "sale:node-resend";
    await observer.call("SECKILL.INIT", sale, 10, "LIMIT", 5, "REPLACE");
    const without = await ownedAfterLostReply(sale, "alice", null);
    const withId = await ownedAfterLostReply(sale, "bob", "attempt-bob-1");
    assert.deepEqual([without, withId], [2, 1]);
    console.log(`lost reply resent by ioredis: without ID the user owns ${without}, with ID ${withId}`);
  } finally {
    nft("delete", "table", "inet", TABLE);
  }
} else {
  console.log("lost reply: SKIPPED (nftables and ss -K need root)");
}

const lock = "lock:node-ghost";
await observer.del(lock);
await observer.call("LOCK.ACQUIRE", lock, "holder", 10_000);
const hurried = new Redis({ port, commandTimeout: 100 });
const told = await hurried.call("LOCK.ACQUIRE", lock, "hurried", 60_000, "WAIT", 2_000)
  .then(() => "granted", (error) => error.message);
assert.match(told, /timed out/);
await observer.call("LOCK.RELEASE", lock, "holder");
const [, owner, , ttl] = await observer.call("LOCK.INFO", lock);
assert.equal(owner, "hurried");
assert.ok(ttl > 50_000);
console.log(`ghost lock: the caller was told "${told}", the server granted it the lock for ${ttl} ms`);
await observer.call("LOCK.RELEASE", lock, "hurried");
hurried.disconnect();
observer.disconnect();
