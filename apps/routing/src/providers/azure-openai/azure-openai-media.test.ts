import { describe, expect, it } from 'vitest';
import { PNG } from 'pngjs';
import { pcmWav } from '@gateway/testing';
import { failureOf, signal } from '../../../test/adapter-test-support.js';
import { URL_STYLES, azureRig } from '../../../test/azure-openai-url-styles.js';

describe.each(URL_STYLES)('AzureOpenAIAdapter embeddings, images and audio over $style', ({ apiVersion, pathOf }) => {
  const rig = azureRig(apiVersion);

  it('embeds texts in input order with the dimensions asked and the reported usage', async () => {
    const result = await rig.adapter.embed({ upstreamModel: 'text-embedding-3-small', texts: ['alpha', 'beta', 'gamma'], tokenInputs: [], dimensions: 4 }, signal());
    const sent = rig.azure.requests[0]!;
    expect(sent.path).toBe(pathOf('embeddings', 'text-embedding-3-small'));
    expect(sent.headers['api-key']).toBe(rig.azure.apiKey);
    expect(sent.body).toEqual({ model: 'text-embedding-3-small', input: ['alpha', 'beta', 'gamma'], encoding_format: 'float', dimensions: 4 });
    expect(result.embeddings).toHaveLength(3);
    expect(result.embeddings.every((vector) => vector.length === 4)).toBe(true);
    expect(result.embeddings[0]).not.toEqual(result.embeddings[1]);
    expect(result.usage?.inputTokens).toBeGreaterThan(0);
  });

  it('generates and edits images (real PNGs back, token usage read)', async () => {
    const generated = await rig.adapter.generateImages({ upstreamModel: 'gpt-image-1', prompt: 'a red square', n: 2, size: '32x32', quality: 'low', background: undefined }, signal());
    expect(rig.azure.requests[0]!.path).toBe(pathOf('images/generations', 'gpt-image-1'));
    expect(rig.azure.requests[0]!.body).toMatchObject({ model: 'gpt-image-1', prompt: 'a red square', n: 2, size: '32x32', quality: 'low' });
    expect(generated.images).toHaveLength(2);
    expect(PNG.sync.read(Buffer.from(generated.images[0]!.data)).width).toBe(32);
    expect(generated.usage).toMatchObject({ outputImageTokens: 2 * 1_056, inputTextTokens: 20, inputImageTokens: 30 });

    const source = { data: generated.images[0]!.data, filename: 'in.png', mediaType: 'image/png' };
    const edited = await rig.adapter.editImages({ upstreamModel: 'gpt-image-1', prompt: 'make it blue', n: 1, size: '16x16', quality: undefined, background: undefined, images: [source], mask: undefined }, signal());
    const edit = rig.azure.requests[1]!;
    expect(edit.path).toBe(pathOf('images/edits', 'gpt-image-1'));
    expect(edit.parts!.find((part) => part.name === 'image[]')!.data.equals(Buffer.from(source.data))).toBe(true);
    expect(edit.parts!.find((part) => part.name === 'prompt')!.data.toString()).toBe('make it blue');
    expect(PNG.sync.read(Buffer.from(edited.images[0]!.data)).height).toBe(16);
  });

  it('speaks: the audio streams through in the container asked for', async () => {
    const result = await rig.adapter.speak({ upstreamModel: 'gpt-4o-mini-tts', input: 'Hello there', voice: 'alloy', speed: undefined, instructions: 'calm', responseFormat: 'wav' }, signal());
    expect(rig.azure.requests[0]!.path).toBe(pathOf('audio/speech', 'gpt-4o-mini-tts'));
    expect(rig.azure.requests[0]!.body).toEqual({ model: 'gpt-4o-mini-tts', input: 'Hello there', voice: 'alloy', instructions: 'calm', response_format: 'wav' });
    expect(result.contentType).toBe('audio/wav');
    const chunks: Uint8Array[] = [];
    for await (const chunk of result.audio) chunks.push(chunk);
    const audio = Buffer.concat(chunks);
    expect(audio.subarray(0, 4).toString('latin1')).toBe('RIFF');
    expect(audio.length).toBeGreaterThan(24_000);
  });

  it('transcribes and translates (json and text formats)', async () => {
    const audio = pcmWav(0.2);
    const base = { upstreamModel: 'whisper', audio, filename: 'a.wav', mediaType: 'audio/wav', prompt: undefined, temperature: undefined };
    const transcript = await rig.adapter.transcribe({ ...base, language: 'de', translate: false, responseFormat: 'json' }, signal());
    expect(rig.azure.requests[0]!.path).toBe(pathOf('audio/transcriptions', 'whisper'));
    expect(rig.azure.requests[0]!.parts!.find((part) => part.name === 'file')!.data.equals(Buffer.from(audio))).toBe(true);
    expect(transcript.text).toBe('Fake transcript (de).');
    const translation = await rig.adapter.transcribe({ ...base, language: 'de', translate: true, responseFormat: 'text' }, signal());
    expect(rig.azure.requests[1]!.path).toBe(pathOf('audio/translations', 'whisper'));
    // Translations take no language (they always answer in English).
    expect(rig.azure.requests[1]!.parts!.some((part) => part.name === 'language')).toBe(false);
    expect(translation.text).toBe('Fake translation into English.');
  });

  it('offers no moderation (Azure has no moderations endpoint), and a deployment of the wrong kind fails over', async () => {
    expect((rig.adapter as { moderate?: unknown }).moderate).toBeUndefined();
    expect('moderate' in rig.adapter).toBe(false);
    const wrong = await failureOf(rig.adapter.embed({ upstreamModel: 'gpt-4o', texts: ['x'], tokenInputs: [], dimensions: undefined }, signal()));
    expect([wrong.kind, wrong.retryable]).toEqual(['misconfigured', true]);
  });
});
