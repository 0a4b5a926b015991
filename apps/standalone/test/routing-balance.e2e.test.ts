import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createDatabase, sql } from '@gateway/platform/db';
import { eventually, parsePrometheusText, sampleSum } from '@gateway/testing';
import { CRASH_MODEL, UPSTREAM_KEY_ENV } from './crash-streams.js';
import { createAccountKey, paidModelFixture, startProcessStack, type PaidModelFixture, type ProcessStack } from './process-stack.js';

// Issue 16: the edge balances over every routing process it is given (ROUTER_ADDR=ipv4:a,b here; a
// dns:/// name of a headless Service in Kubernetes), one Router.Exchange call per routing address, so
// routing pods an HPA adds get traffic. Two routing processes, 1,000 paid requests: both serve a
// share, and every request is charged once.

describe('edge balancing over two routing processes', () => {
  let fixture: PaidModelFixture;
  let stack: ProcessStack;

  beforeAll(async () => {
    fixture = await paidModelFixture('routing-balance-');
    stack = await startProcessStack(
      fixture.database,
      fixture.testBus,
      { catalog: { GATEWAY_CONFIG: fixture.configPath }, routing: { USAGE_OUTBOX_DIR: `${fixture.directory}/routing-0`, [UPSTREAM_KEY_ENV]: 'balance-key' } },
      { extraRouting: { count: 1, outboxRoot: fixture.directory } },
    );
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await fixture?.dispose();
  }, 30_000);

  it('serves 1,000 requests from both routing processes and charges each once', async () => {
    expect(stack.routingReplicas).toHaveLength(2);
    const { accountId, apiKey } = await createAccountKey(stack, 'balance', '1000');
    const client = new OpenAI({ baseURL: `${stack.edgeUrl}/v1`, apiKey, maxRetries: 0 });

    const total = 1_000;
    let next = 0;
    const statuses: string[] = [];
    // 40 callers; every tenth request streamed. (Each holds at least 0.05 credits while it runs: the balance covers them all.)
    await Promise.all(Array.from({ length: 40 }, async () => {
      for (let index = next++; index < total; index = next++) {
        const messages = [{ role: 'user' as const, content: `request ${index}` }];
        try {
          if (index % 10 === 0) {
            const stream = await client.chat.completions.create({ model: CRASH_MODEL, messages, stream: true });
            let text = '';
            for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
            statuses.push(text.length > 0 ? 'ok' : 'empty');
          } else {
            const completion = await client.chat.completions.create({ model: CRASH_MODEL, messages });
            statuses.push(completion.choices[0]?.message.content ? 'ok' : 'empty');
          }
        } catch (error) {
          statuses.push(`error ${(error as Error).message}`);
        }
      }
    }));
    expect(statuses.filter((status) => status !== 'ok')).toEqual([]);

    const served = await Promise.all(stack.routingReplicas.map(async (replica) =>
      sampleSum(parsePrometheusText(await (await fetch(replica.metricsUrl)).text()), 'gateway_upstream_attempts_total', { outcome: 'success' })));
    expect(served[0]! + served[1]!).toBe(total);
    for (const share of served) expect(share, `served per routing process: ${served.join(' / ')}`).toBeGreaterThanOrEqual(total * 0.3);

    const db = createDatabase({ url: fixture.database.url, schema: 'ledger', maxConnections: 1 });
    try {
      await eventually(async () => {
        const { rows } = await sql<{ charges: number; requests: number }>`
          select count(*)::int as charges, count(distinct request_id)::int as requests from charges where account_id = ${accountId}`.execute(db);
        expect(rows[0]).toEqual({ charges: total, requests: total });
      }, 30_000, 200);
    } finally {
      await db.destroy();
    }
  }, 120_000);
});
