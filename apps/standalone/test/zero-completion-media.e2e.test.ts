import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseCredits } from '@gateway/platform';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { mediaCatalog, startMediaHarness, type MediaHarness } from './media-e2e-harness.js';

// Zero-completion insurance beyond chat (issue 27 item 6): an image request answered with no image and
// speech answered with no audio byte are not charged (not even the prompt or its characters); the
// generation record says why. The OpenAI-compatible fake upstream answers exact bytes (`replay`).

describe('zero-completion insurance for images and speech, end to end', () => {
  let upstream: FakeUpstream;
  let harness: MediaHarness;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    // Port 9 (discard): the `down` provider of the catalog refuses every connection.
    harness = await startMediaHarness(mediaCatalog(upstream, 'http://127.0.0.1:9/v1'));
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
    await upstream?.close();
  });

  beforeEach(() => upstream.reset());

  it('an image answer with no image: cost 0, insured no_images; a normal one is charged', async () => {
    upstream.script({ replay: { contentType: 'application/json', body: JSON.stringify({ created: 1_767_225_600, data: [] }) } });
    const { data, response } = await harness.client.images.generate({ model: 'cloud/image', prompt: 'a quiet harbour at dawn' }).withResponse();
    expect(data.data ?? []).toHaveLength(0);
    const id = response.headers.get('x-request-id')!;
    const insured = await harness.generation(id);
    expect(insured).toMatchObject({ model: 'cloud/image', total_cost: '0', insured: true, insured_reason: 'no_images' });
    expect(insured.usage.output_image_tokens).toBe(0);
    expect((await harness.charge(id)).cost_pico).toBe(0n);

    // The same request answered with an image is charged: insurance is only for nothing delivered.
    const { response: charged } = await harness.client.images.generate({ model: 'cloud/image', prompt: 'a quiet harbour at dawn' }).withResponse();
    const paid = await harness.generation(charged.headers.get('x-request-id')!);
    expect(paid.insured).toBe(false);
    expect((await harness.charge(charged.headers.get('x-request-id')!)).cost_pico).toBeGreaterThan(0n);
  });

  it('speech that streams no audio byte: cost 0, insured no_audio', async () => {
    upstream.script({ replay: { contentType: 'audio/mpeg', body: '' } });
    const response = await harness.client.audio.speech.create({ model: 'cloud/speech', voice: 'alloy', input: 'Say something.' });
    expect((await response.arrayBuffer()).byteLength).toBe(0);
    const id = response.headers.get('x-request-id')!;
    const insured = await harness.generation(id);
    expect(insured).toMatchObject({ model: 'cloud/speech', total_cost: '0', insured: true, insured_reason: 'no_audio' });
    expect(insured.usage.input_text_characters).toBe('Say something.'.length);
    expect((await harness.charge(id)).cost_pico).toBe(0n);
  });

  // Cost in every answer (issue 27 item 3) beyond chat: an images answer's usage carries `cost` and
  // `cost_details`, equal (string for string) to the ledger's record of that request's charge, also when
  // zero-completion insurance makes it 0.
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
