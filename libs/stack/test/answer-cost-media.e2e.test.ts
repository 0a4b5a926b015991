import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseCredits } from '@gateway/platform';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { mediaCatalog, startMediaHarness, type MediaHarness } from './media-e2e-harness.js';

// Cost in every answer (issue 27 item 3) beyond chat: an images answer's usage carries `cost` and
// `cost_details`, equal (string for string) to the ledger's record of that request's charge, also when
// zero-completion insurance makes it 0.

describe('images answers show the ledger charge', () => {
  let upstream: FakeUpstream;
  let harness: MediaHarness;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    harness = await startMediaHarness(mediaCatalog(upstream, 'http://127.0.0.1:9/v1'));
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
    await upstream?.close();
  });

  beforeEach(() => upstream.reset());

  it('a generated image: usage.cost is the charge; an answer without an image: cost 0, as charged', async () => {
    const { data, response } = await harness.client.images.generate({ model: 'cloud/image', prompt: 'a quiet harbour at dawn' }).withResponse();
    const usage = data.usage as unknown as { cost: string; cost_details: Record<string, string> };
    const id = response.headers.get('x-request-id')!;
    const charged = await harness.generation(id);
    expect(typeof usage.cost).toBe('string');
    expect(parseCredits(usage.cost)).toBeGreaterThan(0n);
    expect(usage.cost).toBe(charged.total_cost);
    expect(usage.cost_details).toEqual(charged.cost_details);
    expect(Object.values(usage.cost_details).reduce((sum, part) => sum + parseCredits(part), 0n)).toBe(parseCredits(usage.cost));
    expect((await harness.charge(id)).cost_pico).toBe(parseCredits(usage.cost));

    upstream.script({ replay: { contentType: 'application/json', body: JSON.stringify({ created: 1_767_225_600, data: [] }) } });
    const { data: empty, response: insuredResponse } = await harness.client.images.generate({ model: 'cloud/image', prompt: 'a quiet harbour at dawn' }).withResponse();
    const insuredUsage = empty.usage as unknown as { cost: string; cost_details: Record<string, string> };
    const insured = await harness.generation(insuredResponse.headers.get('x-request-id')!);
    expect(insured.insured_reason).toBe('no_images');
    expect(insuredUsage.cost).toBe('0');
    expect(insuredUsage.cost).toBe(insured.total_cost);
    expect(insuredUsage.cost_details).toEqual(insured.cost_details);
  });
});
