// docs/fencing.md: 3 000 grants in one pipeline, read through ioredis as JavaScript numbers,
// each exact (below 2^53) and larger than the one before. Module 0.7's fences (about 1.9e18)
// read as the same number three times in a row. Run: node fences.mjs PORT
import Redis from "ioredis";
import assert from "node:assert/strict";

const redis = new Redis({ port: Number(process.argv[2]) });
const lock = "lock:node-fences";
await redis.del(lock);
const pipeline = redis.pipeline();
for (let n = 0; n < 3000; n++) {
  pipeline.call("LOCK.ACQUIRE", lock, `t${n}`, 60000);
  pipeline.call("LOCK.RELEASE", lock, `t${n}`);
}
const fences = (await pipeline.exec()).filter((_, i) => i % 2 === 0).map(([error, fence]) => {
  assert.equal(error, null);
  return fence;
});
fences.forEach((fence, i) => {
  assert.ok(Number.isSafeInteger(fence), `fence ${fence} is not exact`);
  assert.ok(i === 0 || fence > fences[i - 1], `fence ${i}: ${fence} after ${fences[i - 1]}`);
});
console.log(`ioredis: ${fences.length} fences, exact and increasing, ${fences[0]} to ${fences.at(-1)}`);
redis.disconnect();
