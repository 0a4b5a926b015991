import { request as httpRequest } from 'node:http';
import { readFileSync } from 'node:fs';
import { expect } from 'vitest';
import { pcmWav, type FakeUpstream } from '@gateway/testing';

// What the two upload-memory tests share (issue 29 against separate processes, issue 39 against `npm start`):
// the catalog, the upload over plain node:http, reading a process's resident memory, and the measurement of
// 20 concurrent 19 MiB transcription uploads (idle, peak while they run, after they are answered).

export const UPLOADS = 20;
export const FILE_BYTES = 19 * 1024 * 1024;
export const MiB = 1024 * 1024;

/** One OpenAI-kind provider (its key read from MEMORY_E2E_KEY) serving one transcription model. */
export const uploadMemoryCatalog = (upstream: FakeUpstream) => `
providers:
  - { id: cloud, kind: openai, base_url: ${upstream.url}, api_key_env: MEMORY_E2E_KEY }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 6000 } }
models:
  - id: cloud/transcribe
    created: 1767225605
    input_modalities: [audio]
    supported_parameters: [language, prompt, response_format, temperature]
    pricing: { per_input_audio_hour: "0.36" }
    offers:
      - { provider: cloud, upstream_model: transcribe-x, endpoints: [audio.transcriptions, audio.translations] }
`;

/** Resident memory of a process, bytes (Linux /proc). */
export function rssOf(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

export const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One transcription upload over plain node:http, the shared file buffer written as it is (no copy per
 * request in the test process), `chunked` without a content-length.
 */
export function upload(url: string, apiKey: string, file: Buffer, options: { chunked?: boolean } = {}): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  const boundary = 'memory-test-boundary';
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\ncloud/transcribe\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="long.wav"\r\nContent-Type: audio/wav\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${apiKey}`,
        'content-type': `multipart/form-data; boundary=${boundary}`,
        ...(options.chunked ? {} : { 'content-length': String(head.length + file.length + tail.length) }),
      },
    });
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString(), headers: response.headers }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.write(head);
    request.write(file);
    request.end(tail);
  });
}

/**
 * UPLOADS concurrent FILE_BYTES uploads to `url`, the resident memory of `pids` (summed) sampled every 50 ms:
 * before anything (`started`), after one warm-up upload (`idle`, so lazily loaded code and pools count as
 * idle), at the highest while they run (`peak`) and 5 s after they are all answered (`after`). Checks that
 * the warm-up and every upload were answered 200 and that the provider got each of them once.
 */
export async function measureConcurrentUploads(options: { url: string; apiKey: string; upstream: FakeUpstream; pids: number[] }) {
  const { url, apiKey, upstream, pids } = options;
  const total = () => pids.reduce((sum, pid) => sum + rssOf(pid), 0);
  const file = pcmWav((FILE_BYTES - 44) / 32_000);
  const started = total();
  const warm = await upload(url, apiKey, file);
  expect(warm.status, warm.body).toBe(200);
  upstream.reset();
  await pause(3_000);
  const idle = total();
  const idleEach = pids.map((pid) => rssOf(pid));
  let peak = idle;
  const sampler = setInterval(() => { peak = Math.max(peak, total()); }, 50);
  const answers = await Promise.all(Array.from({ length: UPLOADS }, () => upload(url, apiKey, file)));
  clearInterval(sampler);
  peak = Math.max(peak, total());
  expect(answers.map((answer) => answer.status), answers.find((answer) => answer.status !== 200)?.body).toEqual(Array(UPLOADS).fill(200));
  // Every provider call got the whole file.
  expect(upstream.requests.length).toBe(UPLOADS);
  await pause(5_000);
  const after = total();
  return { started, idle, idleEach, peak, after };
}
