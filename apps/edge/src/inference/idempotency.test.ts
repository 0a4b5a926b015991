import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Cancellation, InProcessEventBus, MemoryKeyValueBucket, type EventBus, type KeyValueBucketOptions } from '@gateway/platform';
import { testLogger } from '@gateway/testing';
import { AnswerCapture, REPLAYED_HEADER, bodyDigest, replayAnswer, type StoredAnswer } from './idempotency-capture.js';
import { decodeRecord, encodeRecord } from './idempotency-record.js';
import { DEFAULT_IDEMPOTENCY_LIMITS, IdempotencyStore, keepsAnswer, type IdempotencyLimits, type IdempotencyOutcome } from './idempotency-store.js';
import { runIdempotent } from './idempotency.js';
import type { InferenceJob } from './pipeline-steps.js';
import type { EdgeContext } from '../context.js';
import { EdgeError } from '../errors.js';

const logger = testLogger('idempotency-test');
const ANSWER: StoredAnswer = { status: 200, headers: [['content-type', 'application/json'], ['x-gateway-request-id', 'req-1']], body: Buffer.from('{"ok":true}') };

describe('bodyDigest', () => {
  it('ignores key order and spacing, and nothing else', () => {
    const digest = bodyDigest('chat.completions', JSON.parse('{"model":"m","messages":[{"role":"user","content":"hi"}]}'));
    expect(bodyDigest('chat.completions', JSON.parse('{ "messages": [ {"content":"hi", "role":"user"} ],  "model": "m" }'))).toBe(digest);
    expect(bodyDigest('chat.completions', { model: 'm', messages: [{ role: 'user', content: 'hi!' }] })).not.toBe(digest);
    expect(bodyDigest('responses', { model: 'm', messages: [{ role: 'user', content: 'hi' }] })).not.toBe(digest);
    // Types count: "1" is not 1, [] is not {}.
    expect(bodyDigest('e', { n: 1 })).not.toBe(bodyDigest('e', { n: '1' }));
    expect(bodyDigest('e', { n: [] })).not.toBe(bodyDigest('e', { n: {} }));
  });

  it('binds the headers that change the answer, and digests a request without them as before', () => {
    const body = { model: 'm', messages: [] };
    const plain = bodyDigest('messages', body);
    expect(bodyDigest('messages', body, {})).toBe(plain);
    expect(bodyDigest('messages', body, { 'anthropic-beta': '' })).toBe(plain);
    const beta = bodyDigest('messages', body, { 'anthropic-beta': 'a' });
    expect(beta).not.toBe(plain);
    expect(bodyDigest('messages', body, { 'anthropic-beta': 'b' })).not.toBe(beta);
    expect(bodyDigest('messages', body, { 'x-gateway-routing-strategy': 'latency', 'anthropic-beta': 'a' }))
      .toBe(bodyDigest('messages', body, { 'anthropic-beta': 'a', 'x-gateway-routing-strategy': 'latency' }));
    expect(bodyDigest('messages', body, { 'anthropic-beta': 'a', 'x-gateway-routing-strategy': 'latency' })).not.toBe(beta);
  });

  it('reads uploaded bytes by content', () => {
    const one = bodyDigest('audio.transcriptions', { model: 'w', file: { data: Buffer.from([1, 2, 3]), filename: 'a.wav' } });
    expect(bodyDigest('audio.transcriptions', { file: { filename: 'a.wav', data: new Uint8Array([1, 2, 3]) }, model: 'w' })).toBe(one);
    expect(bodyDigest('audio.transcriptions', { model: 'w', file: { data: Buffer.from([1, 2, 4]), filename: 'a.wav' } })).not.toBe(one);
  });
});

describe('records', () => {
  it('round-trip in every state, the answer bytes as they were', () => {
    for (const record of [
      { state: 'running', body: 'b', until: 123 },
      { state: 'released', body: 'b' },
      { state: 'too-large', body: 'b', bytes: 2_000_000 },
    ] as const) expect(decodeRecord(encodeRecord(record))).toEqual(record);
    const done = decodeRecord(encodeRecord({ state: 'done', body: 'b', answer: ANSWER }));
    expect(done?.state).toBe('done');
    if (done?.state !== 'done') return;
    expect(done.answer.status).toBe(200);
    expect(done.answer.headers).toEqual(ANSWER.headers);
    expect(Buffer.from(done.answer.body).toString()).toBe('{"ok":true}');
  });

  it('a value that is no record reads as none', () => {
    expect(decodeRecord(new Uint8Array([0, 0, 0, 200, 1]))).toBeUndefined();
    expect(decodeRecord(Buffer.from('\0\0\0\x02{}'))).toBeUndefined();
  });
});

describe('which answers are kept', () => {
  it('2xx and the 4xx a retry would get again; not 5xx nor 4xx of the moment', () => {
    expect([200, 201, 400, 404, 410, 413, 422].every(keepsAnswer)).toBe(true);
    expect([401, 402, 403, 408, 409, 429, 500, 502, 503, 504].some(keepsAnswer)).toBe(false);
  });
});

describe('IdempotencyStore', () => {
  let clock = 1_000_000;
  const now = () => clock;

  function store(limits: Partial<IdempotencyLimits> = {}, bus: EventBus = new InProcessEventBus(logger)): IdempotencyStore {
    return new IdempotencyStore(bus, { ...DEFAULT_IDEMPOTENCY_LIMITS, claimLeaseMs: 60_000, waitMs: 5_000, ...limits }, logger, now);
  }

  async function run(outcome: IdempotencyOutcome) {
    expect(outcome.kind).toBe('run');
    if (outcome.kind !== 'run') throw new Error('no claim');
    return outcome.claim;
  }

  it('the first runs; a duplicate of the same body waits for it and gets its answer', async () => {
    const records = store();
    const claim = await run(await records.begin('k1', 'body-a', new Cancellation(), 'acct-a'));
    const duplicate = records.begin('k1', 'body-a', new Cancellation(), 'acct-a');
    let settled = false;
    void duplicate.then(() => (settled = true));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(settled).toBe(false);
    await claim.finish({ answer: ANSWER });
    const outcome = await duplicate;
    expect(outcome.kind).toBe('replay');
    if (outcome.kind === 'replay') expect(Buffer.from(outcome.answer.body).toString()).toBe('{"ok":true}');
  });

  it('another body under the same key is refused, running or done', async () => {
    const records = store();
    const claim = await run(await records.begin('k2', 'body-a', new Cancellation(), 'acct-a'));
    expect((await records.begin('k2', 'body-b', new Cancellation(), 'acct-a')).kind).toBe('reused');
    await claim.finish({ answer: ANSWER });
    expect((await records.begin('k2', 'body-b', new Cancellation(), 'acct-a')).kind).toBe('reused');
  });

  it('a released key runs again, whatever the body', async () => {
    const records = store();
    const claim = await run(await records.begin('k3', 'body-a', new Cancellation(), 'acct-a'));
    await claim.finish(undefined);
    const again = await run(await records.begin('k3', 'body-b', new Cancellation(), 'acct-a'));
    await again.finish({ answer: ANSWER });
    expect((await records.begin('k3', 'body-b', new Cancellation(), 'acct-a')).kind).toBe('replay');
  });

  it('a claim nobody renews ends by itself: the next request takes the key over', async () => {
    const records = store({ claimLeaseMs: 1_000 });
    const stale = await run(await records.begin('k4', 'body-a', new Cancellation(), 'acct-a'));
    clock += 1_001;
    const fresh = await run(await records.begin('k4', 'body-a', new Cancellation(), 'acct-a'));
    // The stale holder's late answer is not written over the new claim.
    await stale.finish({ answer: { ...ANSWER, body: Buffer.from('stale') } });
    await fresh.finish({ answer: ANSWER });
    const outcome = await records.begin('k4', 'body-a', new Cancellation(), 'acct-a');
    expect(outcome.kind === 'replay' && Buffer.from(outcome.answer.body).toString()).toBe('{"ok":true}');
  });

  it('a duplicate waits at most waitMs, then is told the key is busy', async () => {
    const records = store({ waitMs: 200 });
    const claim = await run(await records.begin('k5', 'body-a', new Cancellation(), 'acct-a'));
    // The store's clock drives the deadline: move it while the duplicate waits.
    const waiting = records.begin('k5', 'body-a', new Cancellation(), 'acct-a');
    await new Promise((resolve) => setTimeout(resolve, 20));
    clock += 201;
    expect((await waiting).kind).toBe('busy');
    await claim.finish(undefined);
  });

  it('waiting duplicates are bounded per account: past maxWaitingPerAccount a duplicate is busy at once; other accounts still wait; a waiter that ends frees its place', async () => {
    const records = store({ maxWaitingPerAccount: 2 });
    const claim = await run(await records.begin('k9', 'body-a', new Cancellation(), 'acct-a'));
    const other = await run(await records.begin('k9-b', 'body-a', new Cancellation(), 'acct-b'));
    const waiters = [records.begin('k9', 'body-a', new Cancellation(), 'acct-a'), records.begin('k9', 'body-a', new Cancellation(), 'acct-a')];
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(records.waitingOf('acct-a')).toBe(2);
    // The third of the account does not wait: busy (409) at once, while the two still wait.
    const started = Date.now();
    expect((await records.begin('k9', 'body-a', new Cancellation(), 'acct-a')).kind).toBe('busy');
    expect(Date.now() - started).toBeLessThan(500);
    // Another account's duplicate is not refused for it.
    const bWaiting = records.begin('k9-b', 'body-a', new Cancellation(), 'acct-b');
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(records.waitingOf('acct-b')).toBe(1);
    await claim.finish({ answer: ANSWER });
    expect((await Promise.all(waiters)).map((outcome) => outcome.kind)).toEqual(['replay', 'replay']);
    expect(records.waitingOf('acct-a')).toBe(0);
    await other.finish({ answer: ANSWER });
    expect((await bWaiting).kind).toBe('replay');
    expect(records.waitingOf('acct-b')).toBe(0);
    // A waiter whose client left gives its place back too.
    const next = await run(await records.begin('k10', 'body-a', new Cancellation(), 'acct-a'));
    const gone = new Cancellation();
    const leaving = records.begin('k10', 'body-a', gone, 'acct-a');
    await new Promise((resolve) => setTimeout(resolve, 20));
    gone.abort();
    clock += 3_000;
    await expect(leaving).rejects.toThrow();
    expect(records.waitingOf('acct-a')).toBe(0);
    await next.finish(undefined);
  });

  it('the store is budgeted per account: one account filling it releases its own oldest records, never another account\'s', async () => {
    const records = store({ maxBucketBytes: 256 * 1024, maxAccountBytes: 32 * 1024, maxAnswerBytes: 16 * 1024 });
    const big: StoredAnswer = { ...ANSWER, body: Buffer.alloc(8 * 1024, 120) };
    const keep = async (recordKey: string, accountId: string) => {
      const claim = await run(await records.begin(recordKey, 'body', new Cancellation(), accountId));
      await claim.finish({ answer: big });
    };
    await keep(IdempotencyStore.recordKey('acct-b', 'b-1'), 'acct-b');
    // Account A writes ten times the whole store's bound.
    for (let index = 0; index < 40; index++) {
      await keep(IdempotencyStore.recordKey('acct-a', `a-${index}`), 'acct-a');
      const kept = await records.keptOf('acct-a');
      expect(kept.bytes).toBeLessThanOrEqual(32 * 1024);
    }
    expect((await records.keptOf('acct-a')).records).toBe(3);
    // B's record is still there: its retry gets the kept answer.
    const bRetry = await records.begin(IdempotencyStore.recordKey('acct-b', 'b-1'), 'body', new Cancellation(), 'acct-b');
    expect(bRetry.kind).toBe('replay');
    // A's newest are kept; its oldest were released (a retry of them runs again, as after the TTL).
    expect((await records.begin(IdempotencyStore.recordKey('acct-a', 'a-39'), 'body', new Cancellation(), 'acct-a')).kind).toBe('replay');
    const oldest = await records.begin(IdempotencyStore.recordKey('acct-a', 'a-0'), 'body', new Cancellation(), 'acct-a');
    expect(oldest.kind).toBe('run');
    if (oldest.kind === 'run') await oldest.claim.finish(undefined);
  });

  it('an account\'s record cap: past maxAccountRecords its oldest record is released', async () => {
    const records = store({ maxAccountRecords: 2 });
    for (const name of ['r1', 'r2', 'r3']) {
      const claim = await run(await records.begin(`cap-${name}`, 'body', new Cancellation(), 'acct-c'));
      await claim.finish({ answer: ANSWER });
    }
    expect((await records.keptOf('acct-c')).records).toBe(2);
    expect((await records.begin('cap-r3', 'body', new Cancellation(), 'acct-c')).kind).toBe('replay');
    const first = await records.begin('cap-r1', 'body', new Cancellation(), 'acct-c');
    expect(first.kind).toBe('run');
    if (first.kind === 'run') await first.claim.finish(undefined);
  });

  it('concurrent kept answers of one account are all counted: never more kept than its bound', async () => {
    const records = store({ maxAccountRecords: 5 });
    const claims = await Promise.all(Array.from({ length: 30 }, async (_, index) => run(await records.begin(`many-${index}`, 'body', new Cancellation(), 'acct-d'))));
    await Promise.all(claims.map((claim) => claim.finish({ answer: ANSWER })));
    expect((await records.keptOf('acct-d')).records).toBe(5);
    const outcomes = await Promise.all(Array.from({ length: 30 }, (_, index) => records.begin(`many-${index}`, 'body', new Cancellation(), 'acct-d')));
    expect(outcomes.filter((outcome) => outcome.kind === 'replay')).toHaveLength(5);
    await Promise.all(outcomes.map((outcome) => (outcome.kind === 'run' ? outcome.claim.finish(undefined) : undefined)));
  });

  it('an answer over the bound leaves a marker', async () => {
    const records = store();
    const claim = await run(await records.begin('k6', 'body-a', new Cancellation(), 'acct-a'));
    await claim.finish({ tooLarge: 5_000_000 });
    const outcome = await records.begin('k6', 'body-a', new Cancellation(), 'acct-a');
    expect(outcome).toEqual({ kind: 'too-large', bytes: 5_000_000 });
  });

  it('a waiting duplicate whose client left stops waiting', async () => {
    const records = store();
    const claim = await run(await records.begin('k7', 'body-a', new Cancellation(), 'acct-a'));
    const gone = new Cancellation();
    const waiting = records.begin('k7', 'body-a', gone, 'acct-a');
    gone.abort();
    await expect(waiting).rejects.toThrow(/client left/);
    await claim.finish(undefined);
  });

  it('racing first requests: exactly one runs', async () => {
    const options: KeyValueBucketOptions = { name: 'x', ttlMs: 60_000, maxBytes: 1 << 20, maxValueBytes: 1 << 20 };
    const bucket = new MemoryKeyValueBucket(options);
    const bus = { keyValue: async () => bucket } as unknown as EventBus;
    const records = [store({}, bus), store({}, bus), store({}, bus)];
    const outcomes = records.map((one) => one.begin('k8', 'body-a', new Cancellation(), 'acct-a'));
    const first = await Promise.race(outcomes);
    const claim = await run(first);
    await claim.finish({ answer: ANSWER });
    const all = await Promise.all(outcomes);
    expect(all.filter((outcome) => outcome.kind === 'run')).toHaveLength(1);
    expect(all.filter((outcome) => outcome.kind === 'replay')).toHaveLength(2);
  });
});

describe('AnswerCapture and replay', () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
  });

  /** Serves one route with `answer`, records it, and on the next request replays what was recorded. */
  async function serve(answer: (response: ServerResponse) => void, maxBytes = 1 << 20) {
    let stored: StoredAnswer | undefined;
    let capture: AnswerCapture | undefined;
    server = createServer((request, response) => {
      request.resume();
      response.setHeader('x-request-id', 'own-id');
      if (stored) return replayAnswer(response, stored);
      capture = new AnswerCapture(response, maxBytes);
      response.once('close', () => {
        if (response.writableFinished && !capture!.overflowed) stored = capture!.answer();
      });
      answer(response);
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, capture: () => capture! };
  }

  it('a JSON answer comes back with the same status, headers and bytes, marked replayed', async () => {
    const { url } = await serve((response) => {
      response.statusCode = 400;
      response.setHeader('content-type', 'application/json; charset=utf-8');
      response.setHeader('x-gateway-request-id', 'req-first');
      response.end('{"error":{"message":"bad"}}');
    });
    const first = await fetch(url, { method: 'POST' });
    const firstBody = await first.text();
    const second = await fetch(url, { method: 'POST' });
    expect(second.status).toBe(400);
    expect(await second.text()).toBe(firstBody);
    expect(second.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(second.headers.get('x-gateway-request-id')).toBe('req-first');
    expect(second.headers.get(REPLAYED_HEADER)).toBe('true');
    expect(first.headers.get(REPLAYED_HEADER)).toBeNull();
  });

  it('a stream comes back as the same events', async () => {
    const { url } = await serve((response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: {"n":1}\n\n');
      setTimeout(() => {
        response.write(Buffer.from('data: {"n":2}\n\n'));
        response.end('data: [DONE]\n\n');
      }, 20);
    });
    const first = await (await fetch(url, { method: 'POST' })).text();
    expect(first).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
    const second = await fetch(url, { method: 'POST' });
    expect(second.headers.get('content-type')).toBe('text/event-stream');
    expect(await second.text()).toBe(first);
  });

  it('past its bound it keeps only the count', async () => {
    const { url, capture } = await serve((response) => {
      response.writeHead(200, { 'content-type': 'application/octet-stream' });
      response.end(Buffer.alloc(2_048));
    }, 1_024);
    await (await fetch(url, { method: 'POST' })).arrayBuffer();
    expect(capture().overflowed).toBe(true);
    expect(capture().bytes).toBe(2_048);
    expect(capture().answer().body.byteLength).toBe(0);
  });
});

describe('runIdempotent', () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
  });

  /**
   * A server whose every request runs `answer` through runIdempotent under one key and body, counting
   * the runs; errors thrown are answered as the edge's route would (status from the error).
   */
  async function serve(answer: (response: ServerResponse, job: { failedAfterCommit: boolean }) => void) {
    const records = new IdempotencyStore(new InProcessEventBus(logger), DEFAULT_IDEMPOTENCY_LIMITS, logger);
    const context = { idempotency: records, logger } as unknown as EdgeContext;
    let runs = 0;
    server = createServer((request, response) => {
      const job = { requestId: 'r', signal: new Cancellation(), failedAfterCommit: false } as unknown as InferenceJob;
      request.resume();
      request.on('end', () => {
        const bound = { key: String(request.headers['idempotency-key']), accountId: 'acct', endpoint: 'chat.completions', body: { n: 1 } };
        runIdempotent(context, bound, response, job, async () => {
          runs++;
          answer(response, job);
        }).catch((error: unknown) => {
          const status = error instanceof EdgeError ? error.apiError.status : 500;
          response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: String(error) }));
        });
      });
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    return { send: (key: string) => fetch(url, { method: 'POST', headers: { 'idempotency-key': key } }), runs: () => runs };
  }

  it('keeps a 2xx answer: the second request is a replay, the route ran once', async () => {
    const { send, runs } = await serve((response) => response.writeHead(200, { 'content-type': 'text/plain' }).end('first'));
    expect(await (await send('a')).text()).toBe('first');
    const again = await eventuallyReplayed(send, 'a');
    expect(await again.text()).toBe('first');
    expect(runs()).toBe(1);
  });

  it('does not keep a 5xx nor a failed stream: the next request runs again', async () => {
    let status = 503;
    const { send, runs } = await serve((response, job) => {
      if (status === 200) job.failedAfterCommit = true;
      response.writeHead(status, { 'content-type': 'text/plain' }).end(`status ${status}`);
    });
    expect((await send('b')).status).toBe(503);
    await new Promise((resolve) => setTimeout(resolve, 50));
    status = 200;
    expect((await send('b')).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await send('b')).headers.get(REPLAYED_HEADER)).toBeNull();
    expect(runs()).toBe(3);
  });

  /** The record is written as the first response closes, a moment after its client read it. */
  async function eventuallyReplayed(send: (key: string) => Promise<Response>, key: string): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const response = await send(key);
      if (response.headers.get(REPLAYED_HEADER) === 'true' || attempt > 20) return response;
      await response.text();
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
});
