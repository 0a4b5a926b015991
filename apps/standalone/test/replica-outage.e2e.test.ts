import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, sql } from '@gateway/platform/db';
import { eventually, type TestDatabase } from '@gateway/testing';
import { exampleTokenCostPico } from './account-harness.js';
import { createAccountKey, healthStatus, startStandaloneProcessStack, type ProcessStack, type StandaloneProcessStack } from './process-stack.js';

// Issue 36 items 2, 3 and 5: a platform team's cluster with replicas killed and restarted under load.
// Two routing and two ledger processes behind one edge (ROUTER_ADDR / LEDGER_ADDR = ipv4:a,b). A replica
// that is down must cost no request a 500: routing's dead address is ejected and a request that never
// reached it goes to the live one; a ledger outage fails over to the other ledger, and with none left
// answers 503 with Retry-After (spec §7), not 500; a SIGTERMed edge answers every connection it accepted.

const MODEL = 'acme/chat-small';

interface Answer {
  status: number;
  retryAfter: string | null;
  body: string;
  requestId: string | null;
}

async function chat(edgeUrl: string, apiKey: string, content = 'one two three'): Promise<Answer> {
  const response = await fetch(`${edgeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }] }),
  });
  return { status: response.status, retryAfter: response.headers.get('retry-after'), body: await response.text(), requestId: response.headers.get('x-request-id') };
}

const killed = (child: import('node:child_process').ChildProcess, signal: NodeJS.Signals) =>
  new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });

/** Each request id charged exactly once, at the catalog's price of the usage its answer reported. */
async function expectEachChargedOnce(databaseUrl: string, answers: Answer[]): Promise<void> {
  const db = createDatabase({ url: databaseUrl, schema: 'ledger', maxConnections: 2 });
  try {
    const expected = new Map(answers.map((answer) => {
      const usage = (JSON.parse(answer.body) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
      return [answer.requestId!, exampleTokenCostPico(MODEL, { input: usage.prompt_tokens, output: usage.completion_tokens })];
    }));
    const ids = [...expected.keys()];
    await eventually(async () => {
      const rows = await sql<{ request_id: string; entries: number; amount: string }>`
        select request_id, count(*)::int as entries, sum(-amount_pico)::text as amount
        from journal_entries where kind = 'charge' and request_id = any(${ids}) group by request_id`.execute(db);
      expect(new Map(rows.rows.map((row) => [row.request_id, [row.entries, BigInt(row.amount)]])))
        .toEqual(new Map(ids.map((id) => [id, [1, expected.get(id)!]])));
    }, 20_000, 200);
  } finally {
    await db.destroy();
  }
}

describe('replicas down under load (issue 36)', () => {
  let database: TestDatabase;
  let standalone: StandaloneProcessStack;
  let stack: ProcessStack;
  /** The drain test's key, made while every ledger is up (gatewayctl talks to the first). */
  let drainKey: string;

  beforeAll(async () => {
    standalone = await startStandaloneProcessStack({}, { extraRouting: { count: 1, outboxRoot: `/tmp/replica-outage-${process.pid}` }, extraLedgers: 1 });
    ({ database, stack } = standalone);
    drainKey = (await createAccountKey(stack, 'edge-drain', '5')).apiKey;
  }, 120_000);

  afterAll(async () => {
    await standalone?.stop();
  }, 30_000);

  it('a SIGKILLed routing replica gets no request: every request succeeds on the live one, each charged once', async () => {
    const { apiKey } = await createAccountKey(stack, 'routing-kill', '5');
    // Both replicas hold an open exchange call.
    for (let index = 0; index < 4; index++) expect((await chat(stack.edgeUrl, apiKey)).status).toBe(200);
    await killed(stack.listeningOn.get(stack.routingReplicas[1]!.address)!, 'SIGKILL');
    // 3 s of requests, past the old 2 s cool-down after which a dead address was tried again.
    const answers: Answer[] = [];
    const until = Date.now() + 3_000;
    while (Date.now() < until) {
      const batch = await Promise.all([chat(stack.edgeUrl, apiKey), chat(stack.edgeUrl, apiKey)]);
      answers.push(...batch);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(answers.filter((answer) => answer.status !== 200).map((answer) => `${answer.status} ${answer.body}`)).toEqual([]);
    expect(answers.length).toBeGreaterThan(10);
    await expectEachChargedOnce(database.url, answers);
  }, 60_000);

  it('one ledger of two down: requests succeed on the other and the edge stays ready; none down: 503 with Retry-After, not ready; back: served at once', async () => {
    const keys = await Promise.all(Array.from({ length: 6 }, (_, index) => createAccountKey(stack, `ledger-kill-${index}`, '5')));
    // The first address goes first: readiness's health channel (pick_first over the list) must move on too.
    const [firstDown, lastDown] = [stack.ledgerReplicas[0]!, stack.ledgerReplicas[1]!];
    await killed(stack.listeningOn.get(firstDown)!, 'SIGKILL');
    // Fresh accounts: each admission needs the ledger (no lease held yet).
    const answers = await Promise.all(keys.slice(0, 3).map(({ apiKey }) => chat(stack.edgeUrl, apiKey)));
    for (const { apiKey } of keys.slice(0, 3)) answers.push(await chat(stack.edgeUrl, apiKey));
    expect(answers.filter((answer) => answer.status !== 200).map((answer) => `${answer.status} ${answer.body}`)).toEqual([]);
    expect((await fetch(`${stack.edgeUrl}/readyz`)).status).toBe(200);
    await expectEachChargedOnce(database.url, answers);

    // No ledger left: a dependency that is down is a 503 with Retry-After, in each dialect's envelope.
    await killed(stack.listeningOn.get(lastDown)!, 'SIGKILL');
    const refused = await chat(stack.edgeUrl, keys[3]!.apiKey);
    expect(refused.status, refused.body).toBe(503);
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(refused.body)).toMatchObject({ error: { type: 'service_unavailable', code: 'service_unavailable' } });
    const messages = await fetch(`${stack.edgeUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': keys[4]!.apiKey, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hello' }] }),
    });
    expect(messages.status).toBe(503);
    expect(Number(messages.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await messages.json()).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
    await eventually(async () => expect((await fetch(`${stack.edgeUrl}/readyz`)).status).toBe(503), 5_000, 100);

    // The ledger comes back on its address: served within a second of it SERVING (no reconnect backoff of seconds).
    stack.launch('ledger', { GRPC_LISTEN: lastDown });
    await eventually(async () => expect(await healthStatus(lastDown)).toBe('SERVING'), 30_000, 50);
    const servingAt = Date.now();
    const after: Answer[] = [];
    for (;;) {
      const answer = await chat(stack.edgeUrl, keys[5]!.apiKey);
      after.push(answer);
      if (answer.status === 200 || Date.now() - servingAt > 5_000) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(after.map((answer) => answer.status).filter((status) => status !== 503 && status !== 200)).toEqual([]);
    expect(after.at(-1)!.status).toBe(200);
    expect(Date.now() - servingAt).toBeLessThan(1_500);
  }, 60_000);

  it('a SIGTERMed edge answers every request on a connection it had accepted', async () => {
    const apiKey = drainKey;
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'one two' }] });
    const request = `POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\nauthorization: Bearer ${apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const port = Number(new URL(stack.edgeUrl).port);
    // Connections the edge has accepted (it idles meanwhile) that have not sent their request yet.
    const sockets = await Promise.all(Array.from({ length: 12 }, () => new Promise<import('node:net').Socket>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => resolve(socket));
      socket.once('error', reject);
    })));
    const answers = sockets.map((socket) => new Promise<string>((resolve) => {
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    }));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const edge = stack.running.get('edge')!;
    const exited = new Promise<number | null>((resolve) => edge.once('exit', (code) => resolve(code)));
    edge.kill('SIGTERM');
    // The requests arrive just after the signal (the stop has begun by then).
    await new Promise((resolve) => setTimeout(resolve, 30));
    for (const socket of sockets) socket.write(request);
    const texts = await Promise.all(answers);
    for (const text of texts) {
      expect(text.split('\r\n')[0], text).toBe('HTTP/1.1 200 OK');
      expect(text.toLowerCase()).toContain('connection: close');
      expect(text).toContain('"choices"');
    }
    expect(await exited, stack.logs.join('')).toBe(0);
  }, 60_000);
});
