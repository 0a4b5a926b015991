import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
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
});
