import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { GrpcStatus, type PromiseClient } from '@gateway/platform';
import { createDatabase, type Kysely } from '@gateway/platform/db';
import { ChatStreamResponse, type ResponsesStoreServiceClient, type StreamResponseEventsResponse } from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import { BackgroundEvents, DEFAULT_BACKGROUND_EVENTS_LIMITS, RecordsBoundExceeded, type BackgroundEventsTable } from '../src/responses/background-events.js';
import { backgroundRequest, failsWith, startBackgroundService, type BackgroundService } from './background-service.js';

// The stored records of background runs (background-events.ts) over real Postgres, and the jobs
// service's StreamResponseEvents over its real gRPC server: batched writes, numbering across attempts,
// a voided attempt that can no longer write, the per-response bound, replay from `from_seq` then the
// live records until the run's end, the account in every lookup, and the bound on followers. The
// runner is idle here (routing unreachable, polls rarely): the test plays the runner's part by hand.

const delta = (content: string) => ChatStreamResponse.fromPartial({ event: { $case: 'delta', value: { content } } });
const contentOf = (message: StreamResponseEventsResponse) => (message.event?.$case === 'record' ? (message.event.value.chunk?.event?.$case === 'delta' ? message.event.value.chunk.event.value.content : null) : undefined);

describe('background run records', () => {
  let service: BackgroundService;
  let client: PromiseClient<ResponsesStoreServiceClient>;
  let db: pg.Client;
  let kysely: Kysely<{ background_events: BackgroundEventsTable }>;
  const limits = { ...DEFAULT_BACKGROUND_EVENTS_LIMITS, flushDelayMs: 200, flushRecords: 5, maxRecords: 40, followPollMs: 30 };
  let events: BackgroundEvents;

  beforeAll(async () => {
    service = await startBackgroundService({ backgroundEvents: { followPollMs: 30, maxFollowers: 2 } });
    ({ client, db } = service);
    kysely = createDatabase<{ background_events: BackgroundEventsTable }>({ url: service.database.url, schema: 'jobs', maxConnections: 2, applicationName: 'events-test' }, testLogger('db'));
    events = new BackgroundEvents(kysely, limits, testLogger('events'));
  });

  afterAll(async () => {
    await kysely?.destroy();
    await service?.stop();
  });

  const create = async (accountId: string, responseId: string) => {
    await client.createBackgroundResponse(backgroundRequest(accountId, responseId, { inputItemsJson: '[]', holdCredits: '', requestJson: '{}' }));
  };
  /** What the runner's claim does: the next attempt, in progress. */
  const claim = async (accountId: string, responseId: string) =>
    (await db.query(`update jobs.background_responses set status = 'in_progress', attempts = attempts + 1 where account_id = $1 and response_id = $2 returning attempts`, [accountId, responseId])).rows[0].attempts as number;
  const finish = (accountId: string, responseId: string) =>
    db.query(`update jobs.background_responses set status = 'completed', ended_at = now() where account_id = $1 and response_id = $2`, [accountId, responseId]);
  const stored = async (responseId: string) =>
    (await db.query(`select seq, attempt, chunk is null as start from jobs.background_events where response_id = $1 order by seq`, [responseId])).rows as { seq: number; attempt: number; start: boolean }[];
  const collect = async (stream: AsyncIterable<StreamResponseEventsResponse>) => {
    const seen: StreamResponseEventsResponse[] = [];
    for await (const message of stream) seen.push(message);
    return seen;
  };

  it('writes records in batches (by age or count), numbered from 0; a reader sees a batch once it is written', async () => {
    await create('acc_a', 'resp_batch');
    const attempt = await claim('acc_a', 'resp_batch');
    const writer = await events.writer('acc_a', 'resp_batch', attempt);
    await writer.begin();
    expect(await stored('resp_batch')).toEqual([{ seq: 0, attempt: 1, start: true }]);
    writer.add(delta('a'));
    writer.add(delta('b'));
    // Younger than flushDelayMs and fewer than flushRecords: not written yet.
    expect(await stored('resp_batch')).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 350));
    expect((await stored('resp_batch')).map((row) => row.seq)).toEqual([0, 1, 2]);
    // A full batch goes at once.
    for (const text of ['c', 'd', 'e', 'f', 'g']) writer.add(delta(text));
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(await stored('resp_batch')).toHaveLength(8);
    await writer.flush();
  });

  it('replays from from_seq, follows live records, and ends with the run once it ended', async () => {
    await create('acc_a', 'resp_live');
    const attempt = await claim('acc_a', 'resp_live');
    const writer = await events.writer('acc_a', 'resp_live', attempt);
    await writer.begin();
    writer.add(delta('one'));
    writer.add(delta('two'));
    await writer.flush();
    const reading = collect(client.streamResponseEvents({ accountId: 'acc_a', responseId: 'resp_live', fromSeq: 2 }, { deadlineMs: 10_000 }));
    await new Promise((resolve) => setTimeout(resolve, 150));
    writer.add(delta('three'));
    await writer.flush();
    await finish('acc_a', 'resp_live');
    const seen = await reading;
    expect(seen[0]!.event?.$case).toBe('response');
    expect(seen.slice(1, -1).map(contentOf)).toEqual(['two', 'three']);
    expect(seen.at(-1)!.event).toMatchObject({ $case: 'end', value: { status: 'completed' } });
    // Past the last record: only the end.
    const after = await collect(client.streamResponseEvents({ accountId: 'acc_a', responseId: 'resp_live', fromSeq: 99 }));
    expect(after.map((message) => message.event?.$case)).toEqual(['response', 'end']);
  });

  it('a later attempt numbers its records after the earlier one; the voided attempt can no longer write', async () => {
    await create('acc_a', 'resp_retry');
    const first = await events.writer('acc_a', 'resp_retry', await claim('acc_a', 'resp_retry'));
    await first.begin();
    first.add(delta('lost'));
    await first.flush();
    // Taken up again (its lease lapsed): attempt 2.
    const second = await events.writer('acc_a', 'resp_retry', await claim('acc_a', 'resp_retry'));
    first.add(delta('late'));
    // Its timed batch fails (quietly: no unhandled rejection), and so does its last flush.
    await new Promise((resolve) => setTimeout(resolve, 350));
    await expect(first.flush()).rejects.toThrow(/no longer/);
    await second.begin();
    second.add(delta('kept'));
    await second.flush();
    expect(await stored('resp_retry')).toEqual([
      { seq: 0, attempt: 1, start: true },
      { seq: 1, attempt: 1, start: false },
      { seq: 2, attempt: 2, start: true },
      { seq: 3, attempt: 2, start: false },
    ]);
  });

  it('bounds the records of one response', async () => {
    await create('acc_a', 'resp_big');
    const writer = await events.writer('acc_a', 'resp_big', await claim('acc_a', 'resp_big'));
    await writer.begin();
    expect(() => { for (let index = 0; index < limits.maxRecords; index++) writer.add(delta('x')); }).toThrow(RecordsBoundExceeded);
    await writer.flush();
    expect(await stored('resp_big')).toHaveLength(limits.maxRecords);
  });

  it("another account's id is NOT_FOUND; a response that is not a background one is FAILED_PRECONDITION; a delete removes the records", async () => {
    await create('acc_a', 'resp_owned');
    await failsWith(collect(client.streamResponseEvents({ accountId: 'acc_b', responseId: 'resp_owned', fromSeq: 0 })), GrpcStatus.NOT_FOUND);
    await client.putResponses({ responses: [{ accountId: 'acc_a', responseId: 'resp_plain', keyId: 'k', responseJson: '{}', inputItemsJson: '[]', createdAt: 0n, conversationId: '', conversationItemsJson: '' }] });
    await failsWith(collect(client.streamResponseEvents({ accountId: 'acc_a', responseId: 'resp_plain', fromSeq: 0 })), GrpcStatus.FAILED_PRECONDITION);
    const writer = await events.writer('acc_a', 'resp_owned', await claim('acc_a', 'resp_owned'));
    await writer.begin();
    await client.deleteResponse({ accountId: 'acc_a', responseId: 'resp_owned' });
    expect(await stored('resp_owned')).toEqual([]);
  });

  it('bounds the followers of a replica', async () => {
    await create('acc_a', 'resp_follow');
    await claim('acc_a', 'resp_follow');
    const opened = [0, 1].map(() => {
      const abort = new AbortController();
      return { abort, done: collect(client.streamResponseEvents({ accountId: 'acc_a', responseId: 'resp_follow', fromSeq: 0 }, { signal: abort.signal })).catch(() => undefined) };
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await failsWith(collect(client.streamResponseEvents({ accountId: 'acc_a', responseId: 'resp_follow', fromSeq: 0 })), GrpcStatus.RESOURCE_EXHAUSTED);
    for (const follower of opened) follower.abort.abort();
    await Promise.all(opened.map((follower) => follower.done));
    // Room again once they left.
    await finish('acc_a', 'resp_follow');
    expect((await collect(client.streamResponseEvents({ accountId: 'acc_a', responseId: 'resp_follow', fromSeq: 0 }))).at(-1)!.event?.$case).toBe('end');
  });
});
