import { spawn } from 'node:child_process';
import type { ServerResponse } from 'node:http';
import { PNG } from 'pngjs';
import { ffmpegPath } from '@gateway/platform';
import { sleep } from './fake-upstream-support.js';
import type { FakeBehaviour } from './fake-upstream-types.js';

// The OpenAI media endpoints of the fake upstream (moderations, images, speech, transcriptions), on the
// OpenAI wire format. Each answers honestly enough to be checked: real PNGs, real audio from ffmpeg.

const CATEGORIES = ['harassment', 'harassment/threatening', 'hate', 'hate/threatening', 'illicit', 'illicit/violent', 'self-harm',
  'self-harm/intent', 'self-harm/instructions', 'sexual', 'sexual/minors', 'violence', 'violence/graphic'];

// The categories OpenAI's omni-moderation checks images for (openai-node `Moderation.CategoryAppliedInputTypes`:
// these allow `'text' | 'image'`, every other category `'text'` only).
const IMAGE_CATEGORIES = new Set(['self-harm', 'self-harm/intent', 'self-harm/instructions', 'sexual', 'violence', 'violence/graphic']);

function moderationRefusal(response: ServerResponse, message: string, code: string | null): void {
  response.writeHead(400, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ error: { message, type: 'invalid_request_error', param: 'input', code } }));
}

/** One moderation result for one input, given as its parts (a plain string is one text part). */
function moderationResult(parts: { type: 'text' | 'image'; content: string }[]) {
  const checkedOn = (name: string) => [...new Set(parts.filter((part) => part.type === 'text' || IMAGE_CATEGORIES.has(name)).map((part) => part.type))];
  const violent = parts.some((part) => part.content.toLowerCase().includes('attack'));
  return {
    flagged: violent,
    categories: Object.fromEntries(CATEGORIES.map((name) => [name, name === 'violence' && violent])),
    category_scores: Object.fromEntries(CATEGORIES.map((name) => [name, name === 'violence' && violent ? 0.97 : 0.001])),
    category_applied_input_types: Object.fromEntries(CATEGORIES.map((name) => [name, checkedOn(name)])),
  };
}

/**
 * POST /v1/moderations, answered as OpenAI answers it: a string is one input, an array of strings N inputs
 * (N results), an array of content objects (`text`, `image_url`) ONE multimodal input (one result, whose
 * `category_applied_input_types` name the part types each category was checked on). Refused with 400 as
 * OpenAI refuses them: an empty array, strings mixed with objects, an unknown part, more than one image
 * (OpenAI: `too_many_images`). An input containing "attack" is flagged for violence.
 */
export function fakeModeration(body: any, response: ServerResponse): void {
  const input = body?.input;
  let results: ReturnType<typeof moderationResult>[];
  if (typeof input === 'string') {
    results = [moderationResult([{ type: 'text', content: input }])];
  } else if (Array.isArray(input) && input.length > 0 && input.every((item) => typeof item === 'string')) {
    results = input.map((text: string) => moderationResult([{ type: 'text', content: text }]));
  } else if (Array.isArray(input) && input.length > 0 && input.every((item) => typeof item === 'object' && item !== null)) {
    const parts: { type: 'text' | 'image'; content: string }[] = [];
    for (const item of input) {
      if (item.type === 'text' && typeof item.text === 'string') parts.push({ type: 'text', content: item.text });
      else if (item.type === 'image_url' && typeof item.image_url?.url === 'string') parts.push({ type: 'image', content: item.image_url.url });
      else return moderationRefusal(response, `Invalid input part of type '${String(item.type)}'.`, null);
    }
    const images = parts.filter((part) => part.type === 'image').length;
    if (images > 1) return moderationRefusal(response, `Number of images (${images}) exceeds maximum of 1`, 'too_many_images');
    results = [moderationResult(parts)];
  } else {
    return moderationRefusal(response, "'input' must be a string, an array of strings, or an array of text and image_url objects.", null);
  }
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ id: 'modr-fake', model: body?.model ?? 'fake-moderation', results }));
}

function png(width: number, height: number, shade: number): Buffer {
  const image = new PNG({ width, height });
  for (let offset = 0; offset < image.data.length; offset += 4) {
    image.data[offset] = shade;
    image.data[offset + 1] = 255 - shade;
    image.data[offset + 2] = 128;
    image.data[offset + 3] = 255;
  }
  return PNG.sync.write(image);
}

/** POST /v1/images/generations and /v1/images/edits: `n` small PNGs as b64_json, with gpt-image usage. */
export function fakeImages(fields: any, behaviour: FakeBehaviour, response: ServerResponse): void {
  const n = Number(fields?.n ?? 1) || 1;
  const [width, height] = String(fields?.size ?? '64x64').split('x').map((value) => Math.min(Number(value) || 64, 512));
  const data = Array.from({ length: n }, (_, index) => ({ b64_json: png(width!, height!, (index * 60) % 256).toString('base64') }));
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(JSON.stringify({
    created: Math.floor(Date.now() / 1000),
    data,
    ...(behaviour.usage === 'absent'
      ? {}
      : { usage: { input_tokens: 50, output_tokens: 1_056 * n, total_tokens: 50 + 1_056 * n, input_tokens_details: { text_tokens: 20, image_tokens: 30 } } }),
  }));
}

const SPEECH_CONTAINERS: Record<string, { args: string[]; type: string }> = {
  mp3: { args: ['-c:a', 'libmp3lame', '-f', 'mp3'], type: 'audio/mpeg' },
  opus: { args: ['-c:a', 'libopus', '-f', 'ogg'], type: 'audio/opus' },
  aac: { args: ['-c:a', 'aac', '-f', 'adts'], type: 'audio/aac' },
  flac: { args: ['-c:a', 'flac', '-f', 'flac'], type: 'audio/flac' },
  wav: { args: ['-c:a', 'pcm_s16le', '-f', 'wav'], type: 'audio/wav' },
  pcm: { args: ['-c:a', 'pcm_s16le', '-f', 's16le'], type: 'audio/pcm' },
};

/**
 * POST /v1/audio/speech: one second of tone in the asked format, made by ffmpeg, sent in `chunkCount`
 * pieces (default 4) with `chunkDelayMs` between them, so a test can see the first bytes arrive at the
 * caller before the last ones are sent. `cutAfterChunks` cuts the connection after that many pieces.
 */
export async function fakeAudioSpeech(body: any, behaviour: FakeBehaviour, response: ServerResponse): Promise<void> {
  const container = SPEECH_CONTAINERS[String(body?.response_format ?? 'mp3')] ?? SPEECH_CONTAINERS.mp3!;
  const audio = await new Promise<Buffer>((resolve, reject) => {
    const child = spawn(ffmpegPath(), ['-hide_banner', '-nostdin', '-v', 'error', '-f', 'lavfi', '-i', 'sine=frequency=330:sample_rate=24000:duration=1', '-ac', '1', ...container.args, 'pipe:1']);
    const chunks: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(Buffer.concat(chunks)) : reject(new Error(`ffmpeg exited ${code}`))));
  });
  const pieces = Math.max(1, behaviour.chunkCount ?? 4);
  const size = Math.ceil(audio.length / pieces);
  response.writeHead(200, { 'content-type': container.type });
  for (let index = 0; index < pieces; index++) {
    if (behaviour.cutAfterChunks !== undefined && index >= behaviour.cutAfterChunks) {
      response.socket?.destroy();
      return;
    }
    if (index > 0 && behaviour.chunkDelayMs) await sleep(behaviour.chunkDelayMs);
    response.write(audio.subarray(index * size, (index + 1) * size));
  }
  response.end();
}

/** POST /v1/audio/transcriptions and /translations: a fixed text in the asked response_format. */
export function fakeTranscription(fields: Record<string, string>, translate: boolean, response: ServerResponse): void {
  const text = translate ? 'Fake translation into English.' : `Fake transcript${fields.language ? ` (${fields.language})` : ''}.`;
  const format = fields.response_format ?? 'json';
  const send = (type: string, payload: string) => {
    response.writeHead(200, { 'content-type': type });
    response.end(payload);
  };
  if (format === 'text') return send('text/plain', `${text}\n`);
  if (format === 'srt') return send('text/plain', `1\n00:00:00,000 --> 00:00:01,000\n${text}\n\n`);
  if (format === 'vtt') return send('text/vtt', `WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n${text}\n\n`);
  if (format === 'verbose_json') {
    return send('application/json', JSON.stringify({ task: translate ? 'translate' : 'transcribe', language: 'english', duration: 1.5, text, segments: [{ id: 0, start: 0, end: 1.5, text }] }));
  }
  send('application/json', JSON.stringify({ text }));
}
