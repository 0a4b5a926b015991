import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startJobsReplica, type RunningEdge, type RunningJobsService } from '../src/index.js';
import { testLogger } from '@gateway/testing';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';
import { startConfiguredStack, type ConfiguredStack } from './configured-stack.js';

// Stored responses are written behind the answer (issue 41 item 6): with the store down the answers
// still come (200, nothing waits for it), the edge serves what waits from its queue, and a clean stop
// of the edge writes it all once the store is back. Two jobs replicas on one database: a response put
// through one is read through the other.

const MODEL = 'testco/durable';

function catalog(upstreamUrl: string): string {
  return catalogYaml({
    providers: [{ id: 'upstream', kind: 'openai', url: upstreamUrl, keyEnv: 'DURABLE_KEY' }],
    models: [{
      id: MODEL,
      supportedParameters: ['temperature'],
      pricing: tokenPricing('0.000001', '0.000002'),
      offers: [{ provider: 'upstream', upstreamModel: 'durable-upstream', endpoints: ['responses'] }],
    }],
  });
}

describe('stored responses: written behind the answer, nothing lost on a clean stop', () => {
  let gateway: ConfiguredStack;
  let apiKey: string;
  let jobs: RunningJobsService | undefined;

  beforeAll(async () => {
    gateway = await startConfiguredStack({
      name: 'responses-durable',
      keyHashSecret: 'responses-durable-secret-0123456789',
      providerSecrets: { DURABLE_KEY: 'sk-durable' },
      config: (upstream) => catalog(upstream.url),
    });
    const account = await gateway.ctl('accounts', 'create', '--name', 'durable', '--credits', '10', '--tier', 'tier-1', '--json');
    apiKey = (await gateway.ctl('keys', 'create', account.account_id!, '--name', 'durable-key', '--json')).api_key!;
  }, 120_000);

  afterAll(async () => {
    await jobs?.stop();
    await gateway?.stop();
  });

  it('store down: answered at once and served from the edge; back up, a clean stop of the edge stores every one; another jobs replica reads them', async () => {
    gateway.upstream.setFallback({ text: 'Kept behind the answer.' });
    const startJobs = (listenAddress: string) => startJobsReplica({ listenAddress, databaseUrl: gateway.database.url, logger: testLogger('jobs-2'), bus: gateway.testBus.bus });
    const second = await startJobs('127.0.0.1:0');
    const address = second.address;
    const edge: RunningEdge = await gateway.startSecondEdge({ name: 'edge-stored', responsesStoreAddress: address, drainTimeoutMs: 10_000, storedResponses: { callDeadlineMs: 1_000 } });
    await second.stop();

    const viaEdge = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    const viaMain = new OpenAI({ baseURL: `${gateway.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    const created = await Promise.all(Array.from({ length: 6 }, (_, index) => viaEdge.responses.create({ model: MODEL, input: `Question ${index}` })));
    const ids = created.map((response) => response.id);
    expect(created.every((response) => (response as { store?: boolean }).store === true)).toBe(true);

    // The store is down: the edge that answered serves them (retrieve and a continuation), the other edge cannot yet.
    for (const id of ids) expect((await viaEdge.responses.retrieve(id)).id).toBe(id);
    const continued = await viaEdge.responses.create({ model: MODEL, previous_response_id: ids[0]!, input: 'And then?' });
    expect(gateway.upstream.requests.at(-1)!.body.messages.map((message: { content: unknown }) => message.content)).toEqual(['Question 0', 'Kept behind the answer.', 'And then?']);
    await expect(viaMain.responses.retrieve(ids[0]!)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    // A delete has to reach the store: while it is down, a 503 with Retry-After after one call's deadline, not a hung request.
    await expect(viaEdge.responses.delete(ids[1]!)).rejects.toMatchObject({ status: 503 });

    // Back on the same address; the edge stops cleanly at once: what waited is written before it is gone.
    jobs = await startJobs(address);
    await edge.stop();
    for (const id of [...ids, continued.id]) {
      const stored = await viaMain.responses.retrieve(id);
      expect(stored.id).toBe(id);
      expect(stored.output_text).toBe('Kept behind the answer.');
    }
    const items = await viaMain.responses.inputItems.list(continued.id, { order: 'asc' });
    expect(items.data).toHaveLength(3);
  });
});
