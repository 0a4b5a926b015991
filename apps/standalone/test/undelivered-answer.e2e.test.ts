import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, parseCredits } from '@gateway/platform';
import { createDatabase, sql } from '@gateway/platform/db';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, TEST_ADMIN_TOKEN, type FakeBehaviour } from '@gateway/testing';
import { CRASH_MODEL, UPSTREAM_KEY_ENV } from './crash-streams.js';
import { createAccountKey, paidModelFixture, startProcessStack, type PaidModelFixture, type ProcessStack } from './process-stack.js';
import { freePort } from '../src/index.js';

// Issue 36's chaos test found a caller charged for a 503: a routing replica killed after it stored a
// non-streamed answer's usage (or, with the edge's call gone, the prompt its upstream already had) and
// before the answer reached the edge. The caller got no content, so no charge may stand: the edge voids the
// request (LedgerService.VoidCharge) and the charge still on the bus is not applied. Reproduced without a
// kill, deterministically: the edge reaches routing through a TCP proxy that cuts every connection the
// moment the upstream has the request; routing lives on and publishes the usage of the request it served.

describe('an answer lost between routing and the edge', () => {
  let fixture: PaidModelFixture;
  let stack: ProcessStack;
  let proxy: Server;
  const links = new Set<Socket>();
  let edgeUrl: string;

  beforeAll(async () => {
    fixture = await paidModelFixture('undelivered-answer-');
    stack = await startProcessStack(fixture.database, fixture.testBus, {
      catalog: { GATEWAY_CONFIG: fixture.configPath },
      routing: { [UPSTREAM_KEY_ENV]: 'undelivered-key' },
    });
    // The edge under test reaches routing only through the proxy.
    proxy = createServer((inbound) => {
      const [host, port] = stack.addresses.routing.split(':');
      const outbound = connect(Number(port), host!);
      for (const socket of [inbound, outbound]) {
        links.add(socket);
        socket.on('close', () => links.delete(socket));
        socket.on('error', () => undefined);
      }
      inbound.pipe(outbound);
      outbound.pipe(inbound);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const port = await freePort();
    stack.launch('edge', { PORT: String(port), METRICS_PORT: String(await freePort()), ROUTER_ADDR: `127.0.0.1:${(proxy.address() as { port: number }).port}` });
    edgeUrl = `http://127.0.0.1:${port}`;
    await eventually(async () => expect((await fetch(`${edgeUrl}/v1/models`)).status).toBe(200), 30_000, 100);
  }, 120_000);

  afterAll(async () => {
    for (const socket of links) socket.destroy();
    proxy?.close();
    await stack?.stop();
    await fixture?.dispose();
  }, 30_000);

  const chat = (apiKey: string, content: string) => fetch(`${edgeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: CRASH_MODEL, messages: [{ role: 'user', content }] }),
  });

  it('answers 503 with Retry-After and charges the caller nothing for it', async () => {
    const { accountId, apiKey } = await createAccountKey(stack, 'undelivered', '1');
    // The upstream answers after 300 ms; the moment it has the request, every edge↔routing link is cut.
    fixture.upstream.setFallback((request): FakeBehaviour => {
      if (JSON.stringify(request.body?.messages ?? '').includes('cut the link')) {
        for (const socket of links) socket.destroy();
      }
      return { latencyMs: 300, usage: { prompt_tokens: 10, completion_tokens: 5 } };
    });
    const lost = await chat(apiKey, 'cut the link');
    expect(lost.status).toBe(503);
    expect(lost.headers.get('retry-after')).toMatch(/^\d+$/);
    const lostId = lost.headers.get('x-request-id')!;
    expect(lostId).toBeTruthy();

    // Routing lived on: it published what the lost request used. A request answered after it, through the
    // same routing process, is settled after it (one consumer, in order): once its charge is in, the lost
    // request's usage has been handled too.
    let sentinel: Response | undefined;
    await eventually(async () => {
      sentinel = await chat(apiKey, 'hello again');
      expect(sentinel.status).toBe(200);
    }, 20_000, 250);
    const sentinelCost = parseCredits(((await sentinel!.json()) as { usage: { cost: string | number } }).usage.cost.toString());
    const sentinelId = sentinel!.headers.get('x-request-id')!;
    const db = createDatabase<any>({ url: fixture.database.url, schema: 'ledger', maxConnections: 2 });
    const ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger, { credential: TEST_ADMIN_TOKEN });
    try {
      await eventually(async () => {
        const rows = await sql<{ request_id: string }>`select request_id from charges where request_id = ${sentinelId}`.execute(db);
        expect(rows.rows).toHaveLength(1);
      }, 20_000, 200);
      // The lost request: its upstream was reached (the charge routing published is what the void turns away).
      expect(fixture.upstream.requests.some((request) => JSON.stringify(request.body?.messages ?? '').includes('cut the link'))).toBe(true);
      const lostCharges = await sql<{ cost_pico: string; voided: boolean }>`select cost_pico::text, voided from charges where request_id = ${lostId}`.execute(db);
      const refunds = await sql<{ amount_pico: string }>`select amount_pico::text from journal where kind = 'refund' and request_id = ${lostId}`.execute(db);
      // Either the void came first (a void row, the charge never applied) or the charge did (refunded in full).
      const charged = lostCharges.rows.filter((row) => !row.voided).reduce((sum, row) => sum + BigInt(row.cost_pico), 0n);
      const refunded = refunds.rows.reduce((sum, row) => sum + BigInt(row.amount_pico), 0n);
      expect(lostCharges.rows).toHaveLength(1);
      expect(charged - refunded).toBe(0n);
      // The balance dropped by the sentinel's cost, exactly.
      const balance = parseCredits((await ledger.getBalance({ accountId })).balance);
      expect(parseCredits('1') - balance).toBe(sentinelCost);
      expect((await ledger.verifyJournal({ accountId })).mismatches).toEqual([]);
    } finally {
      ledger.close();
      await db.destroy();
    }
  }, 90_000);
});
