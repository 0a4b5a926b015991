import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PNG } from 'pngjs';
import pg from 'pg';
import { expect } from 'vitest';
import OpenAI from 'openai';
import { ffmpegPath, parseCredits } from '@gateway/platform';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { ctlJson, generationRecord, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';

/** Prices of the media e2e catalog (credits per unit). */
export const MEDIA_PRICES = {
  embedInput: '0.00000002',
  imageTextInput: '0.000005',
  imageImageInput: '0.00001',
  imageOutput: '0.00004',
  speechCharacter: '0.000015',
  transcribeHour: '0.36',
  moderationInput: '0.0000001',
} as const;

/**
 * One model per endpoint family on the built-in simulated provider (`sim/…`), the same families on an
 * OpenAI-compatible fake upstream (`cloud/…`), and a model whose first offer is a provider that is
 * down (`fallback/…`: failover before any byte).
 */
export function mediaCatalog(upstream: FakeUpstream, downUrl: string): string {
  const family = (prefix: string, provider: string, extraOffers = '') => `
  - id: ${prefix}/embed
    created: 1767225601
    context_window: 8192
    output_modalities: [embeddings]
    supported_parameters: [dimensions, encoding_format]
    pricing: { per_input_token: "${MEDIA_PRICES.embedInput}" }
    offers:${extraOffers ? extraOffers.replaceAll('ENDPOINTS', 'embeddings').replaceAll('UPSTREAM', 'embed-x') : ''}
      - { provider: ${provider}, upstream_model: embed-x, endpoints: [embeddings] }
  - id: ${prefix}/embed-fixed
    created: 1767225601
    context_window: 8192
    output_modalities: [embeddings]
    supported_parameters: [encoding_format]
    pricing: { per_input_token: "${MEDIA_PRICES.embedInput}" }
    offers:
      - { provider: ${provider}, upstream_model: embed-fixed, endpoints: [embeddings] }
  - id: ${prefix}/moderation
    created: 1767225602
    context_window: 32768
    input_modalities: [text, image]
    pricing: { per_input_token: "${MEDIA_PRICES.moderationInput}" }
    offers:
      - { provider: ${provider}, upstream_model: moderation-x, endpoints: [moderations] }
  - id: ${prefix}/image
    created: 1767225603
    context_window: 32000
    input_modalities: [text, image]
    output_modalities: [image]
    supported_parameters: [n, size, quality, background, response_format]
    max_images: 3
    pricing: { per_input_text_token: "${MEDIA_PRICES.imageTextInput}", per_input_image_token: "${MEDIA_PRICES.imageImageInput}", per_output_image_token: "${MEDIA_PRICES.imageOutput}" }
    limit_group: media
    offers:${extraOffers ? extraOffers.replaceAll('ENDPOINTS', 'images.generations, images.edits').replaceAll('UPSTREAM', 'image-x') : ''}
      - { provider: ${provider}, upstream_model: image-x, endpoints: [images.generations, images.edits] }
  - id: ${prefix}/speech
    created: 1767225604
    input_modalities: [text]
    output_modalities: [audio]
    supported_parameters: [voice, instructions, response_format, speed]
    voices: [alloy, coral]${prefix === 'cloud' ? `
    audio_formats: [mp3, wav]` : ''}
    pricing: { per_input_text_character: "${MEDIA_PRICES.speechCharacter}" }
    limit_group: media
    offers:${extraOffers ? extraOffers.replaceAll('ENDPOINTS', 'audio.speech').replaceAll('UPSTREAM', 'speech-x') : ''}
      - { provider: ${provider}, upstream_model: speech-x, endpoints: [audio.speech] }
  - id: ${prefix}/transcribe
    created: 1767225605
    input_modalities: [audio]
    supported_parameters: [language, prompt, response_format, temperature]
    pricing: { per_input_audio_hour: "${MEDIA_PRICES.transcribeHour}" }
    limit_group: media
    offers:${extraOffers ? extraOffers.replaceAll('ENDPOINTS', 'audio.transcriptions, audio.translations').replaceAll('UPSTREAM', 'transcribe-x') : ''}
      - { provider: ${provider}, upstream_model: transcribe-x, endpoints: [audio.transcriptions, audio.translations] }`;
  const downOffer = `
      - { provider: down, upstream_model: UPSTREAM, endpoints: [ENDPOINTS] }`;
  return `
moderation_model: sim/moderation
providers:
  - { id: sim, kind: simulated }
  - { id: cloud, kind: openai, base_url: ${upstream.url}, api_key_env: MEDIA_E2E_KEY }
  - { id: down, kind: openai, base_url: ${downUrl}, api_key_env: MEDIA_E2E_KEY }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
  - id: media
    tiers: { tier-1: { minute: 600 } }
models:${family('sim', 'sim')}${family('cloud', 'cloud')}${family('fallback', 'cloud', downOffer)}
`;
}

export interface MediaHarness {
  base: StackOnCatalog;
  apiKey: string;
  accountId: string;
  client: OpenAI;
  url: string;
  /** The ledger's charge row of one request (waits for it), with its metered usage. */
  charge(requestId: string): Promise<Record<string, string | number | boolean | bigint> & { cost_pico: bigint }>;
  /** Charge rows of a model so far. */
  chargeCount(modelId: string): Promise<number>;
  /** Charge rows of one request (0 or 1). */
  chargesOf(requestId: string): Promise<number>;
  /** GET /v1/generation of one request with the harness's API key, once it answers 200: its `data`. */
  generation(requestId: string): Promise<Record<string, any>>;
  stop(): Promise<void>;
}

export async function startMediaHarness(configYaml: string, edge?: Parameters<typeof startStackOnCatalog>[2]['edge']): Promise<MediaHarness> {
  const base = await startStackOnCatalog('media', configYaml, {
    keyHashSecret: 'media-e2e-secret-media-e2e-secret-01',
    providerSecrets: { MEDIA_E2E_KEY: 'media-upstream-key' },
    ...(edge ? { edge } : {}),
  });
  const pool = new pg.Pool({ connectionString: base.database.url, max: 2 });
  const stop = async () => {
    await pool.end().catch(() => undefined);
    await base.stop();
  };
  try {
    const ctl = (...argv: string[]) => ctlJson(base.stack, ...argv);
    const account = await ctl('accounts', 'create', '--name', 'media-e2e', '--credits', '10', '--tier', 'tier-1', '--json');
    const accountId = account.account_id!;
    const apiKey = (await ctl('keys', 'create', accountId, '--name', 'media-e2e-key', '--json')).api_key!;
    const charge = async (requestId: string) => {
      let row: any;
      await eventually(async () => {
        const result = await pool.query('select * from ledger.charges where request_id = $1', [requestId]);
        expect(result.rows.length).toBe(1);
        row = result.rows[0];
      }, 15_000);
      return { ...row, cost_pico: BigInt(row.cost_pico) };
    };
    const chargeCount = async (modelId: string) =>
      Number((await pool.query('select count(*) as n from ledger.charges where model_id = $1 and account_id = $2', [modelId, accountId])).rows[0].n);
    const chargesOf = async (requestId: string) =>
      Number((await pool.query('select count(*) as n from ledger.charges where request_id = $1', [requestId])).rows[0].n);
    const generation = (requestId: string) => generationRecord(base.stack.url, apiKey, requestId);
    return {
      base,
      chargesOf,
      generation,
      apiKey,
      accountId,
      url: base.stack.url,
      client: new OpenAI({ baseURL: `${base.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 60_000 }),
      charge,
      chargeCount,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A provider that answers every request with 503 (the `fallback/…` models fail over from it), counting them. */
export interface DownUpstream {
  /** Its API root, for mediaCatalog's `downUrl`. */
  url: string;
  /** Requests it answered so far. */
  hits(): number;
  close(): Promise<void>;
}

export async function startDownUpstream(): Promise<DownUpstream> {
  let hits = 0;
  const server = createServer((_request, response) => {
    hits++;
    response.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"down","type":"server_error"}}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    hits: () => hits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * The media stack of media-endpoints: an OpenAI-compatible fake upstream (the `cloud/…` models), a provider
 * that is down (the first offer of the `fallback/…` models) and the harness on mediaCatalog over the two;
 * `stop` ends all three.
 */
export async function startMediaStack(edge?: Parameters<typeof startMediaHarness>[1]) {
  const upstream = await startFakeUpstream();
  const down = await startDownUpstream();
  const harness = await startMediaHarness(mediaCatalog(upstream, down.url), edge);
  const stop = async () => {
    await harness.stop();
    await upstream.close();
    await down.close();
  };
  return { upstream, down, harness, stop };
}

export type MediaStack = Awaited<ReturnType<typeof startMediaStack>>;

/** A square PNG of `size` pixels, every byte of its RGBA data `seed`. */
export function solidPng(size: number, seed: number): Buffer {
  const png = new PNG({ width: size, height: size });
  png.data.fill(seed);
  return PNG.sync.write(png);
}

/** Units × price, in pico-credits. */
export function priced(units: number | bigint | string, price: string): bigint {
  return BigInt(units) * parseCredits(price);
}

/** Audio milliseconds at a per-hour price, rounded half up to the pico as the ledger does. */
export function pricedAudioMs(ms: number | bigint | string, perHour: string): bigint {
  const hour = 3_600_000n;
  return (BigInt(ms) * parseCredits(perHour) + hour / 2n) / hour;
}

/** Runs ffmpeg with `args`, feeding `input`; resolves its stdout, rejects with its stderr on failure. */
export function runFfmpeg(args: readonly string[], input?: Uint8Array): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpegPath(), ['-hide_banner', '-nostdin', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`ffmpeg exited ${code}: ${Buffer.concat(err).toString().slice(-2000)}`))));
    child.stdin.on('error', () => undefined);
    if (input) child.stdin.end(Buffer.from(input));
    else child.stdin.end();
  });
}

/** A tone of `seconds` in the given container (webm/opus, ogg/opus, wav, mp3, flac). */
export function makeAudio(seconds: number, container: 'webm' | 'ogg' | 'wav' | 'mp3' | 'flac'): Promise<Buffer> {
  const codec: Record<typeof container, string[]> = {
    webm: ['-c:a', 'libopus', '-f', 'webm'],
    ogg: ['-c:a', 'libopus', '-f', 'ogg'],
    wav: ['-c:a', 'pcm_s16le', '-f', 'wav'],
    mp3: ['-c:a', 'libmp3lame', '-f', 'mp3'],
    flac: ['-c:a', 'flac', '-f', 'flac'],
  };
  return runFfmpeg(['-f', 'lavfi', '-i', `sine=frequency=440:sample_rate=48000:duration=${seconds}`, '-ac', '1', ...codec[container], 'pipe:1']);
}

/** True when ffmpeg decodes the bytes as `format` without an error (pcm: raw s16le 24 kHz mono). */
export async function decodes(bytes: Uint8Array, format: string): Promise<boolean> {
  const input = format === 'pcm' ? ['-f', 's16le', '-ar', '24000', '-ac', '1'] : [];
  try {
    await runFfmpeg(['-v', 'error', ...input, '-i', 'pipe:0', '-f', 'null', '-'], bytes);
    return true;
  } catch {
    return false;
  }
}
