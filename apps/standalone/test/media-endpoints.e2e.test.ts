import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PNG } from 'pngjs';
import { toFile } from 'openai';
import { formatCredits } from '@gateway/platform';
import type { FakeUpstream } from '@gateway/testing';
import {
  MEDIA_PRICES, decodes, makeAudio, priced, pricedAudioMs, runFfmpeg, solidPng, startMediaStack,
  type DownUpstream, type MediaHarness, type MediaStack,
} from './media-e2e-harness.js';

/**
 * How long a clip is, in ms, decoded here apart from the gateway: to 16 kHz mono 16-bit PCM (what the
 * gateway converts uploads to for transcription), frames / 16 rounded like the ledger's audio units.
 */
async function decodedAudioMs(audio: Buffer): Promise<number> {
  const pcm = await runFfmpeg(['-v', 'error', '-i', 'pipe:0', '-map', '0:a:0', '-c:a', 'pcm_s16le', '-ar', '16000', '-ac', '1', '-f', 's16le', 'pipe:1'], audio);
  return Math.round((pcm.length / 2) * 1000 / 16_000);
}

/** Image tokens the simulated provider counts per input image of an edit (OpenAI's minimum tile cost). */
const SIMULATED_INPUT_IMAGE_TOKENS = 272;

// Issue 15 end to end: every non-chat route through the real `openai` client, on the built-in simulated
// provider (what `npm start` serves) — real vectors, PNGs, audio made and checked with ffmpeg — with the
// exact charge of each unit kind read from the ledger's own charge row.

const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;

describe('embeddings, moderations, images and audio on the simulated provider', () => {
  let stack: MediaStack;
  let upstream: FakeUpstream;
  let harness: MediaHarness;

  beforeAll(async () => {
    // Lowered upload bounds so the hostile-upload cases below stay small and quick.
    stack = await startMediaStack({
      bodyLimits: { maxBytes: 3 * 1024 * 1024, stallTimeoutMs: 1_500 },
      multipartBounds: { fileBytes: 1024 * 1024, files: 4, fields: 12 },
    });
    ({ upstream, harness } = stack);
  }, 120_000);

  afterAll(() => stack?.stop());

  it('embeddings: dimensions reach the provider of a model that lists them; a model that does not goes without and names them (decided once, at the edge)', async () => {
    const sized = await harness.client.embeddings.create({ model: 'cloud/embed', input: 'hi', dimensions: 5, encoding_format: 'float' }).withResponse();
    expect(sized.data.data[0]!.embedding).toHaveLength(5);
    expect(sized.response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect((upstream.requests.at(-1)!.body as { dimensions?: unknown }).dimensions).toBe(5);
    const fixed = await harness.client.embeddings.create({ model: 'cloud/embed-fixed', input: 'hi', dimensions: 5, encoding_format: 'float' }).withResponse();
    expect(fixed.response.headers.get('x-gateway-dropped-params')).toBe('dimensions');
    expect(upstream.requests.at(-1)!.body).not.toHaveProperty('dimensions');
    expect(fixed.data.data[0]!.embedding).toHaveLength(8);
  });

  it('embeds strings as floats and as base64 (equal within float32), in input order, charged by input tokens', async () => {
    const input = ['the gateway routes requests', 'a second input', 'third'];
    const { data: floats, response } = await harness.client.embeddings.create({ model: 'sim/embed', input, encoding_format: 'float' }).withResponse();
    expect(floats.object).toBe('list');
    expect(floats.model).toBe('sim/embed');
    expect(floats.data.map((item) => item.index)).toEqual([0, 1, 2]);
    for (const item of floats.data) {
      const norm = Math.sqrt(item.embedding.reduce((sum, value) => sum + value * value, 0));
      expect(norm).toBeCloseTo(1, 6);
    }
    // The SDK asks for base64 when no format is given and decodes the little-endian float32 bytes itself.
    const viaBase64 = await harness.client.embeddings.create({ model: 'sim/embed', input });
    expect(viaBase64.data).toHaveLength(3);
    viaBase64.data.forEach((item, index) => {
      const reference = floats.data[index]!.embedding;
      expect(item.embedding).toHaveLength(reference.length);
      item.embedding.forEach((value, position) => expect(value).toBeCloseTo(Math.fround(reference[position]!), 7));
    });
    expect(floats.usage.prompt_tokens).toBeGreaterThan(0);
    expect(floats.usage.total_tokens).toBe(floats.usage.prompt_tokens);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_tokens)).toBe(floats.usage.prompt_tokens);
    expect(charge.cost_pico).toBe(priced(floats.usage.prompt_tokens, MEDIA_PRICES.embedInput));
  });

  it('embeds token-id inputs and honours dimensions', async () => {
    const { data, response } = await harness.client.embeddings
      .create({ model: 'sim/embed', input: [[1, 2, 3, 4], [5, 6]], encoding_format: 'float', dimensions: 64 })
      .withResponse();
    expect(data.data.map((item) => item.embedding.length)).toEqual([64, 64]);
    expect(data.usage.prompt_tokens).toBe(6);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(charge.cost_pico).toBe(priced(6, MEDIA_PRICES.embedInput));
  });

  it('refuses embeddings input past its bounds with a 400 naming the limit', async () => {
    const tooMany = await fetch(`${harness.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim/embed', input: Array.from({ length: 2049 }, () => 'x') }),
    });
    expect(tooMany.status).toBe(400);
    expect(((await tooMany.json()) as { error: { message: string } }).error.message).toMatch(/2048/);
    const wrongModel = await fetch(`${harness.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim/speech', input: 'x' }),
    });
    expect(wrongModel.status).toBe(400);
    expect(((await wrongModel.json()) as { error: { message: string } }).error.message).toMatch(/embeddings/);
  });

  it('moderates strings one result each, and text + image objects as ONE input with the types each category applied to', async () => {
    const strings = await harness.client.moderations
      .create({ model: 'sim/moderation', input: ['I will kill you', 'What a lovely afternoon for a walk.'] })
      .withResponse();
    expect(strings.data.model).toBe('sim/moderation');
    expect(strings.data.results.map((result) => result.flagged)).toEqual([true, false]);
    for (const result of strings.data.results) {
      const names = Object.keys(result.categories);
      expect(names.length).toBeGreaterThanOrEqual(11);
      expect(Object.keys(result.category_scores).sort()).toEqual([...names].sort());
      for (const score of Object.values(result.category_scores)) expect(score >= 0 && score <= 1).toBe(true);
      expect(Object.keys(result.category_applied_input_types).sort()).toEqual([...names].sort());
      for (const types of Object.values(result.category_applied_input_types)) expect(types).toEqual(['text']);
    }
    // o200k tokens: "I will kill you" 4, "What a lovely afternoon for a walk." 8.
    const stringsCharge = await harness.charge(strings.response.headers.get('x-request-id')!);
    expect(String(stringsCharge.input_tokens)).toBe('12');
    expect(stringsCharge.cost_pico).toBe(priced(12, MEDIA_PRICES.moderationInput));

    const { data, response } = await harness.client.moderations
      .create({
        model: 'sim/moderation',
        input: [
          { type: 'text', text: 'describe this image' },
          { type: 'image_url', image_url: { url: 'https://images.example/gore.png' } },
        ],
      })
      .withResponse();
    expect(data.results).toHaveLength(1);
    const [result] = data.results;
    expect(result!.flagged).toBe(true);
    expect(result!.categories['violence/graphic']).toBe(true);
    expect(result!.category_applied_input_types['violence/graphic']).toEqual(['text', 'image']);
    expect(result!.category_applied_input_types.harassment).toEqual(['text']);
    // "describe this image" is 3 tokens; the image 2,000 (README).
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(String(charge.input_tokens)).toBe('2003');
    expect(charge.cost_pico).toBe(priced(2_003, MEDIA_PRICES.moderationInput));
  });

  it('generates PNGs as b64_json and as hosted URLs, charged per image token and prompt token', async () => {
    const { data: inline, response } = await harness.client.images
      .generate({ model: 'sim/image', prompt: 'a lighthouse at dusk', n: 2, size: '256x256', response_format: 'b64_json' })
      .withResponse();
    expect(inline.data).toHaveLength(2);
    const pngs = inline.data!.map((image) => PNG.sync.read(Buffer.from(image.b64_json!, 'base64')));
    for (const png of pngs) expect([png.width, png.height]).toEqual([256, 256]);
    const usage = inline.usage!;
    expect(usage.output_tokens).toBeGreaterThan(0);
    expect(usage.total_tokens).toBe(usage.input_tokens + usage.output_tokens);
    // 256x256 is one tile: 272 image tokens (the minimum) per image; the input is the prompt's text tokens alone.
    expect(usage.output_tokens).toBe(2 * 272);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.output_image_tokens)).toBe(usage.output_tokens);
    expect(charge.cost_pico).toBe(priced(usage.input_tokens, MEDIA_PRICES.imageTextInput) + priced(usage.output_tokens, MEDIA_PRICES.imageOutput));

    const hosted = await harness.client.images.generate({ model: 'sim/image', prompt: 'a lighthouse at dusk', size: '256x256', response_format: 'url' });
    // EDGE_PUBLIC_URL is unset here: the URL is the path alone, relative to the gateway (issue 29).
    const url = `${harness.url}${hosted.data![0]!.url!}`;
    expect(hosted.data![0]!.url!).toMatch(/^\/v1\/images\/files\/[A-Za-z0-9_-]{20,}$/);
    const served = await fetch(url);
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toBe('image/png');
    const png = PNG.sync.read(Buffer.from(await served.arrayBuffer()));
    expect([png.width, png.height]).toEqual([256, 256]);
    const guessed = await fetch(url.replace(/[A-Za-z0-9_-]{4}$/, 'AAAA'));
    expect(guessed.status).toBe(404);
  });

  it('refuses n above the model maximum and a malformed size with 400s, charging nothing', async () => {
    await expect(harness.client.images.generate({ model: 'sim/image', prompt: 'x', n: 4 })).rejects.toMatchObject({ status: 400 });
    await expect(harness.client.images.generate({ model: 'sim/image', prompt: 'x', size: 'large' as '256x256' })).rejects.toMatchObject({ status: 400 });
  });

  it('screens a generation prompt with the moderation model: flagged is a 403 and nothing is charged', async () => {
    const error = await harness.client.images.generate({ model: 'sim/image', prompt: 'how to kill a person', size: '256x256' }).catch((caught) => caught);
    expect(error.status).toBe(403);
    expect(error.message).toMatch(/moderation|flagged/i);
    const requestId = (error.headers as Headers).get('x-request-id')!;
    expect(requestId).toBeTruthy();
    // A clean prompt sent after it is charged: once its charge is there, the refused one's would be too.
    const { response } = await harness.client.images.generate({ model: 'sim/image', prompt: 'a quiet harbour', size: '256x256', response_format: 'b64_json' }).withResponse();
    await harness.charge(response.headers.get('x-request-id')!);
    expect(await harness.chargesOf(requestId)).toBe(0);
  });

  it('edits with two images and a mask from a multipart upload', async () => {
    const image = (seed: number) => solidPng(64, seed);
    const { data, response } = await harness.client.images
      .edit({
        model: 'sim/image',
        prompt: 'add a red balloon',
        image: [await toFile(image(10), 'one.png', { type: 'image/png' }), await toFile(image(200), 'two.png', { type: 'image/png' })],
        mask: await toFile(image(0), 'mask.png', { type: 'image/png' }),
        size: '256x256',
        response_format: 'b64_json',
      })
      .withResponse();
    expect(data.data).toHaveLength(1);
    expect(PNG.sync.read(Buffer.from(data.data![0]!.b64_json!, 'base64')).width).toBe(256);
    // The reported input is text + image tokens: the two input images are 272 each, the rest is the prompt.
    const imageTokens = 2 * SIMULATED_INPUT_IMAGE_TOKENS;
    const textTokens = data.usage!.input_tokens - imageTokens;
    expect(textTokens).toBeGreaterThan(0);
    expect(data.usage!.output_tokens).toBe(272);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(charge.cost_pico).toBe(
      priced(textTokens, MEDIA_PRICES.imageTextInput) + priced(imageTokens, MEDIA_PRICES.imageImageInput) + priced(data.usage!.output_tokens, MEDIA_PRICES.imageOutput),
    );
  });

  it.each(SPEECH_FORMATS)('speaks %s: a valid file of that format, charged per character', async (format) => {
    const input = 'Hello from the gateway, in six formats.';
    const response = await harness.client.audio.speech.create({ model: 'sim/speech', voice: 'alloy', input, response_format: format });
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(bytes.length).toBeGreaterThan(100);
    expect(await decodes(bytes, format)).toBe(true);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_text_characters)).toBe([...input].length);
    expect(charge.cost_pico).toBe(priced([...input].length, MEDIA_PRICES.speechCharacter));
  });

  it('speaks as server-sent events with stream_format sse: speech.audio.delta events of the same audio, then speech.audio.done; charged the same', async () => {
    const input = 'Hello from the gateway, as events.';
    const raw = new Uint8Array(await (await harness.client.audio.speech.create({ model: 'sim/speech', voice: 'alloy', input, response_format: 'wav' })).arrayBuffer());
    const response = await harness.client.audio.speech.create({ model: 'sim/speech', voice: 'alloy', input, response_format: 'wav', stream_format: 'sse' });
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    const events = (await response.text())
      .split('\n\n')
      .filter((frame) => frame.startsWith('data: '))
      .map((frame) => JSON.parse(frame.slice('data: '.length)) as { type: string; audio?: string; usage?: Record<string, number> });
    expect(events.length).toBeGreaterThan(1);
    const deltas = events.slice(0, -1);
    for (const delta of deltas) expect(delta.type).toBe('speech.audio.delta');
    const done = events.at(-1)!;
    expect(done.type).toBe('speech.audio.done');
    expect(done.usage).toEqual({ input_tokens: expect.any(Number), output_tokens: expect.any(Number), total_tokens: done.usage!.input_tokens! + done.usage!.output_tokens! });
    // The events carry exactly the audio the raw answer does (the simulated voice is deterministic).
    const audio = Buffer.concat(deltas.map((delta) => Buffer.from(delta.audio!, 'base64')));
    expect(new Uint8Array(audio)).toEqual(raw);
    expect(await decodes(new Uint8Array(audio), 'wav')).toBe(true);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(charge.cost_pico).toBe(priced([...input].length, MEDIA_PRICES.speechCharacter));
  });

  it('answers audio/mpeg for speech when no format is named', async () => {
    const response = await harness.client.audio.speech.create({ model: 'sim/speech', voice: 'coral', input: 'default format' });
    expect(response.headers.get('content-type')).toBe('audio/mpeg');
    expect(await decodes(new Uint8Array(await response.arrayBuffer()), 'mp3')).toBe(true);
  });

  it('refuses an unknown voice, a speed of zero and an unknown format with 400s', async () => {
    await expect(harness.client.audio.speech.create({ model: 'sim/speech', voice: 'nobody', input: 'x' })).rejects.toMatchObject({ status: 400 });
    await expect(harness.client.audio.speech.create({ model: 'sim/speech', voice: 'alloy', input: 'x', speed: 0 })).rejects.toMatchObject({ status: 400 });
    await expect(
      harness.client.audio.speech.create({ model: 'sim/speech', voice: 'alloy', input: 'x', response_format: 'ogg' as 'mp3' }),
    ).rejects.toMatchObject({ status: 400 });
  });

  it('transcribes a webm upload (converted for the provider) and charges its measured duration per hour', async () => {
    const audio = await makeAudio(2, 'webm');
    const { data, response } = await harness.client.audio.transcriptions
      .create({ model: 'sim/transcribe', file: await toFile(audio, 'clip.webm', { type: 'audio/webm' }) })
      .withResponse();
    expect(data.text.length).toBeGreaterThan(0);
    const expectedMs = await decodedAudioMs(audio);
    expect(Math.abs(expectedMs - 2000)).toBeLessThan(100);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_audio_ms)).toBe(expectedMs);
    expect(charge.cost_pico).toBe(pricedAudioMs(expectedMs, MEDIA_PRICES.transcribeHour));
  });

  it('answers each transcription response_format with its content type', async () => {
    const audio = await makeAudio(1, 'wav');
    const ask = async (format: string) => {
      const form = new FormData();
      form.set('model', 'sim/transcribe');
      form.set('response_format', format);
      form.set('file', new Blob([audio], { type: 'audio/wav' }), 'clip.wav');
      const response = await fetch(`${harness.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${harness.apiKey}` }, body: form });
      expect(response.status).toBe(200);
      return { type: response.headers.get('content-type') ?? '', text: await response.text() };
    };
    const json = await ask('json');
    expect(json.type).toMatch(/^application\/json/);
    expect(typeof JSON.parse(json.text).text).toBe('string');
    const verbose = await ask('verbose_json');
    expect(verbose.type).toMatch(/^application\/json/);
    expect(JSON.parse(verbose.text)).toHaveProperty('segments');
    expect((await ask('text')).type).toMatch(/^text\/plain/);
    const srt = await ask('srt');
    expect(srt.text).toMatch(/\d\d:\d\d:\d\d,\d\d\d --> \d\d:\d\d:\d\d,\d\d\d/);
    const vtt = await ask('vtt');
    expect(vtt.type).toMatch(/^text\/vtt/);
    expect(vtt.text.startsWith('WEBVTT')).toBe(true);
  });

  it('translates an ogg upload into English text', async () => {
    const audio = await makeAudio(1, 'ogg');
    const translation = await harness.client.audio.translations.create({ model: 'sim/transcribe', file: await toFile(audio, 'clip.ogg', { type: 'audio/ogg' }) });
    expect(translation.text.length).toBeGreaterThan(0);
  });

  describe('hostile uploads', () => {
    const boundary = 'hostile-boundary';
    const post = (path: string, body: Buffer, contentType = `multipart/form-data; boundary=${boundary}`, length = body.length) =>
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${harness.apiKey}\r\nContent-Type: ${contentType}\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`;
    const statusOf = (answer: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);

    it('refuses a file over the per-file bound with 413 while it streams', async () => {
      const body = multipartPayload(boundary, [{ name: 'model', data: 'sim/transcribe' }, { name: 'file', filename: 'big.wav', data: Buffer.alloc(1024 * 1024 + 10, 1) }]);
      expect(statusOf(await rawExchange(harness.url, post('/v1/audio/transcriptions', body), body))).toBe(413);
    });

    it('refuses a body over the total bound with 413 before it has all arrived', async () => {
      // Declares no length (chunked) and keeps sending: the answer must come once the bound is passed.
      const head = `POST /v1/images/edits HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${harness.apiKey}\r\nContent-Type: multipart/form-data; boundary=${boundary}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;
      const piece = multipartPayload(boundary, [{ name: 'image[]', filename: 'a.png', data: Buffer.alloc(900 * 1024, 2) }], false);
      let payload = '';
      for (let index = 0; index < 4; index++) payload += `${piece.length.toString(16)}\r\n${piece.toString('latin1')}\r\n`;
      expect(statusOf(await rawExchange(harness.url, head, Buffer.from(payload, 'latin1')))).toBe(413);
    });

    it('refuses too many parts, a missing boundary, a wrong content type and a truncated upload with 400s', async () => {
      const many = multipartPayload(boundary, Array.from({ length: 20 }, (_, index) => ({ name: `f${index}`, data: 'x' })));
      expect(statusOf(await rawExchange(harness.url, post('/v1/audio/transcriptions', many), many))).toBe(400);
      const plain = Buffer.from('model=sim/transcribe');
      expect(statusOf(await rawExchange(harness.url, post('/v1/audio/transcriptions', plain, 'multipart/form-data'), plain))).toBe(400);
      expect(statusOf(await rawExchange(harness.url, post('/v1/audio/transcriptions', plain, 'application/x-www-form-urlencoded'), plain))).toBe(400);
      const truncated = multipartPayload(boundary, [{ name: 'model', data: 'sim/transcribe' }, { name: 'file', filename: 'a.wav', data: Buffer.alloc(1000, 3) }], false);
      // The whole declared body arrives, but the multipart never closes: a truncated upload.
      const unclosed = await rawExchange(harness.url, post('/v1/audio/transcriptions', truncated), truncated);
      expect(statusOf(unclosed)).toBe(400);
    });

    it('answers 408 to an upload that stalls', async () => {
      const partial = multipartPayload(boundary, [{ name: 'model', data: 'sim/transcribe' }], false);
      const answer = await rawExchange(harness.url, post('/v1/audio/transcriptions', partial, undefined, partial.length + 5_000), partial, { waitMs: 6_000 });
      expect(statusOf(answer)).toBe(408);
    });
  });

  it('refuses a language that is not a lower-case ISO 639-1 code', async () => {
    const audio = await makeAudio(1, 'wav');
    await expect(
      harness.client.audio.transcriptions.create({ model: 'sim/transcribe', file: await toFile(audio, 'clip.wav'), language: 'English' }),
    ).rejects.toMatchObject({ status: 400 });
  });
});


/** Sends raw bytes to the edge and reads the whole answer (the connection is closed by the server or after `waitMs`). */
function rawExchange(url: string, head: string, body: Buffer | string, options: { endWrite?: boolean; waitMs?: number } = {}): Promise<string> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1');
    let answer = '';
    socket.on('data', (chunk) => { answer += chunk.toString('latin1'); });
    socket.on('error', () => resolve(answer));
    socket.on('close', () => resolve(answer));
    socket.on('connect', () => {
      socket.write(head);
      socket.write(body);
      if (options.endWrite) socket.end();
    });
    setTimeout(() => { socket.destroy(); resolve(answer); }, options.waitMs ?? 5_000);
    void reject;
  });
}

function multipartPayload(boundary: string, parts: { name: string; filename?: string; data: Buffer | string }[], close = true): Buffer {
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const disposition = `form-data; name="${part.name}"${part.filename ? `; filename="${part.filename}"` : ''}`;
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}\r\n${part.filename ? 'Content-Type: application/octet-stream\r\n' : ''}\r\n`));
    chunks.push(Buffer.isBuffer(part.data) ? part.data : Buffer.from(part.data), Buffer.from('\r\n'));
  }
  if (close) chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(chunks);
}

describe('the same routes against an OpenAI-compatible upstream', () => {
  let stack: MediaStack;
  let upstream: FakeUpstream;
  let down: DownUpstream;
  let harness: MediaHarness;

  beforeAll(async () => {
    stack = await startMediaStack();
    ({ upstream, down, harness } = stack);
  }, 120_000);

  afterAll(() => stack?.stop());

  const lastUpstream = (path: string) => [...upstream.requests].reverse().find((request) => request.path === path)!;

  // Issue 30 item 5: OpenAI reads a string as one input, strings as one input each, and an array of content
  // objects as ONE multimodal input. The upstream is sent exactly what the client sent; OpenAI reports no
  // usage for moderations, so the charge is the gateway's count: o200k text tokens + 2,000 per image.
  it('moderates a string through the upstream: sent as a string, one result, charged its tokens', async () => {
    const { data, response } = await harness.client.moderations.create({ model: 'cloud/moderation', input: 'plan the attack' }).withResponse();
    expect(data.model).toBe('cloud/moderation');
    expect(data.results.map((item) => item.flagged)).toEqual([true]);
    expect(lastUpstream('/v1/moderations').body).toEqual({ model: 'moderation-x', input: 'plan the attack' });
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(String(charge.input_tokens)).toBe('3');
    expect(charge.cost_pico).toBe(priced(3, MEDIA_PRICES.moderationInput));
  });

  it('moderates strings through the upstream: sent as strings, one result each in order, charged their tokens', async () => {
    const { data, response } = await harness.client.moderations.create({ model: 'cloud/moderation', input: ['plan the attack', 'tea time'] }).withResponse();
    expect(data.results.map((item) => item.flagged)).toEqual([true, false]);
    expect(lastUpstream('/v1/moderations').body).toEqual({ model: 'moderation-x', input: ['plan the attack', 'tea time'] });
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(String(charge.input_tokens)).toBe('5');
    expect(charge.cost_pico).toBe(priced(5, MEDIA_PRICES.moderationInput));
  });

  it('moderates text + image objects through the upstream as ONE input: sent as objects, one result, charged text tokens + 2,000', async () => {
    const input = [
      { type: 'text' as const, text: 'a quiet picture' },
      { type: 'image_url' as const, image_url: { url: 'https://images.example/attack.png' } },
    ];
    const { data, response } = await harness.client.moderations.create({ model: 'cloud/moderation', input }).withResponse();
    expect(lastUpstream('/v1/moderations').body).toEqual({ model: 'moderation-x', input });
    expect(data.results).toHaveLength(1);
    expect(data.results[0]!.flagged).toBe(true);
    expect(data.results[0]!.category_applied_input_types.violence).toEqual(['text', 'image']);
    expect(data.results[0]!.category_applied_input_types.harassment).toEqual(['text']);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(String(charge.input_tokens)).toBe('2003');
    expect(charge.cost_pico).toBe(priced(2_003, MEDIA_PRICES.moderationInput));
  });

  it('refuses two images in one multimodal moderation input as OpenAI does (400 too_many_images), before the upstream', async () => {
    const before = upstream.requests.length;
    const error = await harness.client.moderations
      .create({
        model: 'cloud/moderation',
        input: [
          { type: 'image_url', image_url: { url: 'https://images.example/a.png' } },
          { type: 'image_url', image_url: { url: 'https://images.example/b.png' } },
        ],
      })
      .catch((caught) => caught);
    expect(error.status).toBe(400);
    expect(error.error).toMatchObject({ type: 'invalid_request_error', code: 'too_many_images', param: 'input' });
    expect(upstream.requests.length).toBe(before);
  });

  it('edits with image[] x2 and a mask: the upstream receives every part, and the provider-reported tokens are charged', async () => {
    const image = (seed: number) => solidPng(32, seed);
    const { data, response } = await harness.client.images
      .edit({
        model: 'cloud/image',
        prompt: 'make it blue',
        image: [await toFile(image(1), 'a.png', { type: 'image/png' }), await toFile(image(2), 'b.png', { type: 'image/png' })],
        mask: await toFile(image(3), 'mask.png', { type: 'image/png' }),
        n: 2,
        size: '64x64',
        response_format: 'b64_json',
      })
      .withResponse();
    expect(data.data).toHaveLength(2);
    const parts = lastUpstream('/v1/images/edits').parts!;
    expect(parts.filter((part) => part.name === 'image[]').map((part) => part.filename)).toEqual(['a.png', 'b.png']);
    expect(parts.find((part) => part.name === 'mask')?.data.equals(image(3))).toBe(true);
    expect(parts.find((part) => part.name === 'model')?.data.toString()).toBe('image-x');
    const inputPico = priced(20, MEDIA_PRICES.imageTextInput) + priced(30, MEDIA_PRICES.imageImageInput);
    const outputPico = priced(2_112, MEDIA_PRICES.imageOutput);
    // usage.cost (issue 27 item 3): the charge, as a decimal string, split by kind.
    expect(data.usage).toEqual({
      input_tokens: 50, output_tokens: 2_112, total_tokens: 2_162, cost: formatCredits(inputPico + outputPico),
      cost_details: { input: formatCredits(inputPico), output: formatCredits(outputPico), cache_read: '0', cache_write: '0', reasoning: '0' },
    });
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(charge.cost_pico).toBe(inputPico + outputPico);
  });

  it('streams speech: the first bytes reach the caller before the upstream has sent the last', async () => {
    upstream.script({ chunkCount: 4, chunkDelayMs: 300 });
    const response = await fetch(`${harness.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cloud/speech', voice: 'alloy', input: 'streaming please', response_format: 'wav' }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('audio/wav');
    const reader = response.body!.getReader();
    const chunks: Uint8Array[] = [];
    let firstAt = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!firstAt) firstAt = Date.now();
      chunks.push(value);
    }
    const endedAt = Date.now();
    // Three 300 ms pauses upstream come after the first piece: the caller had it at least ~900 ms earlier.
    expect(endedAt - firstAt).toBeGreaterThan(700);
    expect(await decodes(Buffer.concat(chunks), 'wav')).toBe(true);
  });

  it('refuses a speech format the model does not list in its audio_formats, and lists them', async () => {
    const error = await harness.client.audio.speech.create({ model: 'cloud/speech', voice: 'alloy', input: 'x', response_format: 'flac' }).catch((caught) => caught);
    expect(error.status).toBe(400);
    expect(error.message).toMatch(/mp3, wav/);
    const listing = (await (await fetch(`${harness.url}/v1/models/cloud/speech`)).json()) as { audio_formats?: string[] };
    expect(listing.audio_formats).toEqual(['mp3', 'wav']);
  });

  it('cuts the caller\'s connection when the upstream fails after the first audio bytes (no clean end)', async () => {
    upstream.script({ chunkCount: 4, chunkDelayMs: 50, cutAfterChunks: 2 });
    const response = await fetch(`${harness.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cloud/speech', voice: 'alloy', input: 'cut me', response_format: 'wav' }),
    });
    expect(response.status).toBe(200);
    await expect(response.arrayBuffer()).rejects.toThrow();
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(charge.cost_pico).toBe(priced([...'cut me'].length, MEDIA_PRICES.speechCharacter));
  });

  it('fails over from a provider that is down before any byte, and charges once', async () => {
    // The strategy orders the two offers; within a few requests the down one comes first at least once.
    const before = down.hits();
    for (let attempt = 0; attempt < 12 && down.hits() === before; attempt++) {
      const { response } = await harness.client.audio.speech.create({ model: 'fallback/speech', voice: 'coral', input: 'failover', response_format: 'mp3' }).withResponse();
      expect(response.status).toBe(200);
      expect(await decodes(new Uint8Array(await response.arrayBuffer()), 'mp3')).toBe(true);
      const charge = await harness.charge(response.headers.get('x-request-id')!);
      expect(charge.provider_id).toBe('cloud');
      expect(charge.cost_pico).toBe(priced([...'failover'].length, MEDIA_PRICES.speechCharacter));
    }
    expect(down.hits()).toBeGreaterThan(before);
    const generated = await harness.client.images.generate({ model: 'fallback/image', prompt: 'failover image', size: '64x64', response_format: 'b64_json' });
    expect(generated.data).toHaveLength(1);
  });

  it('converts a webm upload to wav for the upstream and charges the measured length', async () => {
    const audio = await makeAudio(1.5, 'webm');
    const { data, response } = await harness.client.audio.transcriptions
      .create({ model: 'cloud/transcribe', file: await toFile(audio, 'voice.webm', { type: 'audio/webm' }), language: 'de' })
      .withResponse();
    expect(data.text).toBe('Fake transcript (de).');
    const file = lastUpstream('/v1/audio/transcriptions').parts!.find((part) => part.name === 'file')!;
    expect(file.filename).toBe('voice.wav');
    expect(file.contentType).toBe('audio/wav');
    expect(file.data.subarray(0, 4).toString('latin1')).toBe('RIFF');
    const expectedMs = await decodedAudioMs(audio);
    expect(Math.abs(expectedMs - 1500)).toBeLessThan(100);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_audio_ms)).toBe(expectedMs);
    expect(charge.cost_pico).toBe(pricedAudioMs(expectedMs, MEDIA_PRICES.transcribeHour));
  });

  it('translates through the upstream translations endpoint and passes verbose_json through', async () => {
    const audio = await makeAudio(1, 'mp3');
    const form = new FormData();
    form.set('model', 'cloud/transcribe');
    form.set('response_format', 'verbose_json');
    form.set('file', new Blob([audio], { type: 'audio/mpeg' }), 'clip.mp3');
    const response = await fetch(`${harness.url}/v1/audio/translations`, { method: 'POST', headers: { authorization: `Bearer ${harness.apiKey}` }, body: form });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { task: string; text: string; duration: number };
    expect(body).toMatchObject({ task: 'translate', text: 'Fake translation into English.', duration: 1.5 });
    // The mp3 went as it was; the provider's reported 1.5 s is what is charged.
    expect(lastUpstream('/v1/audio/translations').parts!.find((part) => part.name === 'file')!.filename).toBe('clip.mp3');
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_audio_ms)).toBe(1500);
    expect(charge.cost_pico).toBe(pricedAudioMs(1500, MEDIA_PRICES.transcribeHour));
  });
});
