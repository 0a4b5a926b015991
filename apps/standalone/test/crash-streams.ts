import { expect } from 'vitest';
import type OpenAI from 'openai';
import { createDatabase, sql } from '@gateway/platform/db';
import { CHECKPOINT_INTERVAL_MS, FIRST_CHECKPOINT_AFTER_MS } from '@gateway/platform';
import { eventually, type FakeBehaviour, type FakeUpstream } from '@gateway/testing';
import { oneProviderCatalog, paidTextModel } from './catalog-yaml.js';

// Shared by the crash tests (usage-crash-*.e2e.test.ts): a paid model on a slow fake upstream, streams
// followed chunk by chunk through the real `openai` client, and the check that every stream that
// reached its caller is charged exactly once, for at least what it delivered up to the bound a crash
// may lose.

export const CRASH_MODEL = 'crashco/paid';
export const UPSTREAM_KEY_ENV = 'CRASH_UPSTREAM_KEY';
/** Every content chunk is the one token " hello", so tokens delivered = chunks delivered. */
const WORD = ' hello';
/** In flight at the kill: 60 chunks, 50 ms apart (3 s). */
export const SLOW_TOKENS = 60;
const SLOW_CHUNK_DELAY_MS = 50;
/** All content sent well before the kill, then no end (or, where the test says so, an end whose usage is not stored). */
export const DONE_TOKENS = 12;
const DONE_CHUNK_DELAY_MS = 20;
/**
 * A whole stream inside a few milliseconds, far younger than the first checkpoint: until its usage event is
 * stored only the event in routing's memory (and the copy the edge was handed) can charge it.
 */
export const SHORT_TOKENS = 3;
const PROMPT_TOKENS = 10;
/**
 * What a crash may lose of a stream in flight (libs/platform usage-checkpoints.ts): the first checkpoint delay plus
 * one interval, and slack for the fdatasync and for scheduling on a shared 2-core machine.
 */
export const CHECKPOINT_LOSS_BOUND_MS = FIRST_CHECKPOINT_AFTER_MS + CHECKPOINT_INTERVAL_MS + 200;

export function crashCatalog(upstream: FakeUpstream): string {
  return oneProviderCatalog({
    startup: 'crashco', displayName: 'Crash Co', provider: 'crash-upstream', upstream, keyEnv: UPSTREAM_KEY_ENV, perMinute: 6000,
    models: [paidTextModel({ id: CRASH_MODEL, owner: 'crashco', provider: 'crash-upstream', upstreamModel: 'crash-model', endpoints: ['chat.completions'] })],
  });
}

export type StreamKind = 'slow' | 'done' | 'short';

/**
 * The upstream's answer by prompt: "slow" streams for 3 s; "done" sends all its content at once-ish and
 * then either stalls before its end (`doneStalls`) or ends normally; anything else is a short answer.
 * Usage is reported exactly (one token per chunk), so checkpoints and final events agree on it.
 */
export function crashUpstreamScript(upstream: FakeUpstream, options: { doneStalls: boolean }): void {
  upstream.setFallback((request): FakeBehaviour => {
    const prompt = JSON.stringify(request.body?.messages ?? '');
    if (prompt.includes('slow')) {
      return { text: WORD.repeat(SLOW_TOKENS), chunkCount: SLOW_TOKENS, chunkDelayMs: SLOW_CHUNK_DELAY_MS, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: SLOW_TOKENS } };
    }
    if (prompt.includes('short')) {
      return { text: WORD.repeat(SHORT_TOKENS), chunkCount: SHORT_TOKENS, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: SHORT_TOKENS } };
    }
    if (prompt.includes('done')) {
      return {
        text: WORD.repeat(DONE_TOKENS), chunkCount: DONE_TOKENS, chunkDelayMs: DONE_CHUNK_DELAY_MS,
        usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: DONE_TOKENS },
        ...(options.doneStalls ? { stallAfterChunks: DONE_TOKENS } : {}),
      };
    }
    return { usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: 5 } };
  });
}

export interface FollowedStream {
  kind: StreamKind;
  requestId: string;
  /** When each token reached this client. */
  tokenTimes: number[];
  /** Settles when the stream ends or breaks (the crash); never rejects. */
  finished: Promise<void>;
  /** The stream ended as a complete answer (the SDK saw its end without an error). */
  complete: boolean;
}

/** Opens a stream and follows it in the background; the request id is the edge's x-request-id. */
export async function followStream(client: OpenAI, kind: StreamKind): Promise<FollowedStream> {
  const { data, response } = await client.chat.completions
    .create({ model: CRASH_MODEL, messages: [{ role: 'user', content: `${kind} stream please` }], stream: true })
    .withResponse();
  const requestId = response.headers.get('x-request-id');
  expect(requestId).toBeTruthy();
  const followed: FollowedStream = { kind, requestId: requestId!, tokenTimes: [], finished: Promise.resolve(), complete: false };
  followed.finished = (async () => {
    try {
      for await (const chunk of data) {
        const content = chunk.choices[0]?.delta?.content ?? '';
        const now = Date.now();
        for (let index = content.indexOf(WORD); index >= 0; index = content.indexOf(WORD, index + 1)) followed.tokenTimes.push(now);
      }
      followed.complete = true;
    } catch {
      // The crash breaks the stream; what was delivered is in tokenTimes.
    }
  })();
  return followed;
}

/**
 * Until the moment to kill: every slow stream past its first checkpoint (10 tokens = 500 ms, the
 * first of them longer than the loss bound ago), every "done" stream with all its content delivered
 * longer than the loss bound ago.
 */
export async function untilKillPoint(streams: FollowedStream[]): Promise<void> {
  await eventually(() => {
    const now = Date.now();
    for (const stream of streams) {
      if (stream.kind === 'short') {
        // Its whole answer, end included, is with the client; only its usage event is not stored.
        expect(stream.complete, stream.requestId).toBe(true);
        expect(stream.tokenTimes.length, stream.requestId).toBe(SHORT_TOKENS);
      } else if (stream.kind === 'slow') {
        expect(stream.tokenTimes.length, stream.requestId).toBeGreaterThanOrEqual(10);
        // So that some of what it delivered lies before the loss bound, where the check starts.
        expect(now - stream.tokenTimes[0]!, stream.requestId).toBeGreaterThan(CHECKPOINT_LOSS_BOUND_MS + 200);
      } else {
        expect(stream.tokenTimes.length, stream.requestId).toBe(DONE_TOKENS);
        expect(now - stream.tokenTimes.at(-1)!, stream.requestId).toBeGreaterThan(CHECKPOINT_LOSS_BOUND_MS);
      }
    }
  }, 20_000, 20);
}

/**
 * Waits until every request has its charge, then checks: one charge (and one journal entry) each; a
 * slow stream charged at least what it delivered up to the loss bound before the kill and never more
 * than the upstream generated; a "done" stream charged exactly what it delivered; `others` charged.
 */
export async function expectChargedOnce(databaseUrl: string, streams: FollowedStream[], killedAt: number, others: string[] = []): Promise<void> {
  const db = createDatabase({ url: databaseUrl, schema: 'ledger', maxConnections: 2 });
  try {
    const requestIds = [...streams.map((stream) => stream.requestId), ...others];
    const charges = await eventually(async () => {
      const result = await sql<{ request_id: string; input_tokens: string; output_tokens: string }>`
        select request_id, input_tokens::text, output_tokens::text from charges where request_id = any(${requestIds})`.execute(db);
      expect(result.rows.map((row) => row.request_id).sort()).toEqual([...requestIds].sort());
      return new Map(result.rows.map((row) => [row.request_id, { input: Number(row.input_tokens), output: Number(row.output_tokens) }]));
    }, 30_000, 200);
    for (const stream of streams) {
      const charge = charges.get(stream.requestId)!;
      const label = `${stream.kind} ${stream.requestId}: delivered ${stream.tokenTimes.length}, charged ${charge.output}`;
      expect(charge.input, label).toBeGreaterThan(0);
      if (stream.kind === 'done' || stream.kind === 'short') {
        expect(charge.output, label).toBe(stream.kind === 'done' ? DONE_TOKENS : SHORT_TOKENS);
        continue;
      }
      const deliveredBeforeBound = stream.tokenTimes.filter((at) => at <= killedAt - CHECKPOINT_LOSS_BOUND_MS).length;
      expect(deliveredBeforeBound, label).toBeGreaterThan(0);
      expect(charge.output, label).toBeGreaterThanOrEqual(deliveredBeforeBound);
      expect(charge.output, label).toBeLessThanOrEqual(SLOW_TOKENS);
    }
    const journal = await sql<{ request_id: string; entries: number }>`
      select request_id, count(*)::int as entries from journal_entries where kind = 'charge' and request_id = any(${requestIds}) group by request_id`.execute(db);
    expect(new Map(journal.rows.map((row) => [row.request_id, row.entries]))).toEqual(new Map(requestIds.map((requestId) => [requestId, 1])));
  } finally {
    await db.destroy();
  }
}
