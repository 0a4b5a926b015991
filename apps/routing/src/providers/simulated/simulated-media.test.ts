import { describe, expect, it } from 'vitest';
import { PNG } from 'pngjs';
import { SimulatedAdapter } from './simulated-adapter.js';
import { MODERATION_CATEGORIES } from './simulate-moderation.js';

const adapter = new SimulatedAdapter('sim');
const live = () => new AbortController().signal;

describe('simulated provider: the endpoints beyond chat', () => {
  it('moderates by keyword: every category present, scores in [0, 1], one result per string', async () => {
    const { results, usage } = await adapter.moderate({ upstreamModel: 'm', input: { form: 'strings', texts: ['I will kill you', 'a calm lake'] } }, live());
    expect(results.map((result) => result.flagged)).toEqual([true, false]);
    expect(results[0]!.categories.violence).toBe(true);
    for (const result of results) {
      expect(Object.keys(result.categories).sort()).toEqual([...MODERATION_CATEGORIES].sort());
      for (const score of Object.values(result.categoryScores)) expect(score >= 0 && score <= 1).toBe(true);
      for (const types of Object.values(result.categoryAppliedInputTypes)) expect(types).toEqual(['text']);
    }
    // o200k: "I will kill you" 4 tokens, "a calm lake" 3.
    expect(usage!.inputTokens).toBe(7);
    const single = await adapter.moderate({ upstreamModel: 'm', input: { form: 'string', text: 'a calm lake' } }, live());
    expect(single.results).toEqual([results[1]]);
  });

  it('moderates text and image parts as ONE input: one result, images checked on image categories only, each image 2,000 tokens', async () => {
    const parts = [{ type: 'text' as const, text: 'a calm lake' }, { type: 'image_url' as const, url: 'https://x/gore.png' }];
    const { results, usage } = await adapter.moderate({ upstreamModel: 'm', input: { form: 'multimodal', parts } }, live());
    expect(results).toHaveLength(1);
    const [result] = results;
    expect(result!.flagged).toBe(true);
    expect(result!.categories['violence/graphic']).toBe(true);
    expect(result!.categoryAppliedInputTypes['violence/graphic']).toEqual(['text', 'image']);
    expect(result!.categoryAppliedInputTypes.harassment).toEqual(['text']);
    expect(usage!.inputTokens).toBe(3 + 2_000);
    const imageOnly = await adapter.moderate({ upstreamModel: 'm', input: { form: 'multimodal', parts: [parts[1]!] } }, live());
    expect(imageOnly.results[0]!.categoryAppliedInputTypes.harassment).toEqual([]);
    expect(imageOnly.results[0]!.categoryScores.harassment).toBe(0);
    expect(imageOnly.results[0]!.categoryAppliedInputTypes.violence).toEqual(['image']);
  });

  it('draws PNGs of the asked size, different for different prompts, the same for the same one', async () => {
    const draw = (prompt: string) => adapter.generateImages({ upstreamModel: 'i', prompt, n: 2, size: '128x64', quality: undefined, background: undefined }, live());
    const first = await draw('a red fox');
    const again = await draw('a red fox');
    const other = await draw('a blue whale');
    const pixels = first.images.map((image) => PNG.sync.read(Buffer.from(image.data)));
    expect(pixels.map((png) => [png.width, png.height])).toEqual([[128, 64], [128, 64]]);
    expect(Buffer.from(first.images[0]!.data).equals(Buffer.from(again.images[0]!.data))).toBe(true);
    expect(Buffer.from(first.images[0]!.data).equals(Buffer.from(other.images[0]!.data))).toBe(false);
    expect(Buffer.from(first.images[0]!.data).equals(Buffer.from(first.images[1]!.data))).toBe(false);
    expect(first.usage!.outputImageTokens).toBeGreaterThan(0);
    await expect(adapter.generateImages({ upstreamModel: 'i', prompt: 'x', n: 1, size: '4096x4096', quality: undefined, background: undefined }, live())).rejects.toMatchObject({ kind: 'rejected' });
  });

  it("picks its own size for size 'auto' (issue 37): 1024x1024, metered as that size", async () => {
    const auto = await adapter.generateImages({ upstreamModel: 'i', prompt: 'x', n: 1, size: 'auto', quality: undefined, background: undefined }, live());
    const png = PNG.sync.read(Buffer.from(auto.images[0]!.data));
    expect([png.width, png.height]).toEqual([1024, 1024]);
    const explicit = await adapter.generateImages({ upstreamModel: 'i', prompt: 'x', n: 1, size: '1024x1024', quality: undefined, background: undefined }, live());
    expect(auto.usage!.outputImageTokens).toBe(explicit.usage!.outputImageTokens);
  });

  it('transcribes the same bytes to the same text, in English for a translation, in every format', async () => {
    const request = { upstreamModel: 't', audio: new Uint8Array([1, 2, 3, 4]), filename: 'a.wav', mediaType: 'audio/wav', prompt: undefined, language: 'de', temperature: undefined, translate: false };
    const json = await adapter.transcribe({ ...request, responseFormat: 'json' }, live());
    expect((await adapter.transcribe({ ...request, responseFormat: 'json' }, live())).text).toBe(json.text);
    expect(json.text.startsWith('[de]')).toBe(true);
    expect((await adapter.transcribe({ ...request, translate: true, responseFormat: 'json' }, live())).text.startsWith('[de]')).toBe(false);
    expect((await adapter.transcribe({ ...request, responseFormat: 'srt' }, live())).content).toMatch(/^1\n00:00:00,000 --> 00:00:02,500\n/);
    expect((await adapter.transcribe({ ...request, responseFormat: 'vtt' }, live())).content).toMatch(/^WEBVTT\n\n00:00:00\.000 --> /);
    expect(JSON.parse((await adapter.transcribe({ ...request, responseFormat: 'verbose_json' }, live())).content).segments).toHaveLength(1);
  });

  it('streams speech as ffmpeg makes it, and an abort stops it', async () => {
    const speech = await adapter.speak({ upstreamModel: 's', input: 'one two three', voice: 'alloy', speed: undefined, instructions: undefined, responseFormat: 'wav' }, live());
    expect(speech.contentType).toBe('audio/wav');
    const chunks: Uint8Array[] = [];
    for await (const chunk of speech.audio) chunks.push(chunk);
    const wav = Buffer.concat(chunks);
    expect(wav.subarray(0, 4).toString('latin1')).toBe('RIFF');
    const controller = new AbortController();
    const long = await adapter.speak({ upstreamModel: 's', input: 'word '.repeat(200), voice: 'alloy', speed: 0.25, instructions: undefined, responseFormat: 'flac' }, controller.signal);
    const iterator = long.audio[Symbol.asyncIterator]();
    await iterator.next();
    controller.abort();
    await expect((async () => { for (;;) { const next = await iterator.next(); if (next.done) return; } })()).rejects.toBeDefined();
  });
});
