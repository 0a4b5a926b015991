import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '@gateway/platform';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { createTestDatabase, type TestDatabase } from '@gateway/testing';
import { LeasedWorkLoop } from '../src/leased-work-loop.js';
import { JOBS_SCHEMA, type JobsDatabase } from '../src/jobs-schema.js';

// Stopping the work loop of the lower-priority runners (src/leased-work-loop.ts) at shutdown: the jobs
// service destroys its pool right after the runners' stop(), so stop() waits for a claim round or a
// lease renewal already running (within its grace), as it waits for the work itself. Real Postgres.

const logger = createLogger('jobs-test', 'silent');
const OPTIONS = { name: 'test loop', concurrency: 2, leaseMs: 300, pollIntervalMs: 3_600_000 };

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
}, 60_000);

afterAll(async () => {
  await database?.drop();
});

/** A promise and its resolve, to hold a round or a renewal where the test wants it. */
function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => { open = resolve; });
  return { promise, open };
}

/** A pool of its own, and the query a round or a renewal makes once let go (its failure kept). */
function pool() {
  const db: Kysely<JobsDatabase> = createDatabase<JobsDatabase>({ url: database.url, schema: JOBS_SCHEMA, maxConnections: 2 }, logger);
  const failures: unknown[] = [];
  const query = () => sql<{ n: number }>`select 1 as n`.execute(db).then(() => undefined, (error: unknown) => { failures.push(error); });
  return { db, failures, query };
}

describe('stopping the leased work loop', () => {
  it('waits for the claim round in flight before the pool is destroyed', async () => {
    const { db, failures, query } = pool();
    const entered = latch();
    const release = latch();
    let rounds = 0;
    const loop = new LeasedWorkLoop(OPTIONS, {
      round: async () => {
        rounds++;
        entered.open();
        await release.promise;
        await query();
      },
      renew: async () => undefined,
    }, logger);
    const ticking = loop.tick();
    await entered.promise;
    // Shutdown as the jobs service does it: stop the loop, then destroy the pool. The round goes on meanwhile.
    const shutdown = loop.stop(10_000).then(() => db.destroy());
    release.open();
    await shutdown;
    await ticking;
    expect(failures).toEqual([]);
    expect(rounds).toBe(1);
    expect(loop.stopped).toBe(true);
  });

  it('waits for a lease renewal in flight (the heartbeat) as well', async () => {
    const { db, failures, query } = pool();
    const entered = latch();
    const release = latch();
    let renewals = 0;
    const loop = new LeasedWorkLoop(OPTIONS, {
      round: async () => undefined,
      renew: async () => {
        renewals++;
        entered.open();
        await release.promise;
        await query();
      },
    }, logger);
    loop.start();
    await entered.promise;
    const shutdown = loop.stop(10_000).then(() => db.destroy());
    release.open();
    await shutdown;
    expect(failures).toEqual([]);
    expect(renewals).toBeGreaterThanOrEqual(1);
  });

  it('a round that outlasts the grace does not hold the stop', async () => {
    const entered = latch();
    const never = latch();
    const loop = new LeasedWorkLoop(OPTIONS, { round: async () => { entered.open(); await never.promise; }, renew: async () => undefined }, logger);
    void loop.tick();
    await entered.promise;
    await loop.stop(50);
    expect(loop.stopped).toBe(true);
    never.open();
  });
});
