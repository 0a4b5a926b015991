import { request as httpRequest } from 'node:http';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { npmStartBanner, pcmWav, startFakeUpstream, startNpmStart, type FakeUpstream, type NpmStart } from '@gateway/testing';
import { stopProcessesMentioning } from './leftover-processes.js';

// Issue 39: `npm start` (one node process holding every service, as package.json's start script runs it:
// the image's node flags and malloc threshold) under 20 concurrent 19 MiB transcription uploads. Before the
// start script had the image's settings its process went from 156 to 430 MB and kept 319 MB afterwards.
// The uploads are spooled to disk at the edge and a bounded number of them is held in memory at once
// (upload-memory.e2e.test.ts, issue 29), so the node process may grow by at most 250 MB and must come back
// within 100 MB of where it was once they are answered.

const UPLOADS = 20;
const FILE_BYTES = 19 * 1024 * 1024;
const MiB = 1024 * 1024;

const catalog = (upstream: FakeUpstream) => `
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
function rssOf(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

/** One transcription upload over plain node:http, the shared file buffer written as it is. */
function upload(url: string, apiKey: string, file: Buffer): Promise<{ status: number; body: string }> {
  const boundary = 'npm-start-memory-boundary';
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
        'content-length': String(head.length + file.length + tail.length),
      },
    });
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.write(head);
    request.write(file);
    request.end(tail);
  });
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('npm start: upload memory', () => {
  const root = mkdtempSync(join(tmpdir(), 'npm-start-memory-'));
  // The embedded Postgres runs as the `postgres` user when the tests run as root: it must enter the directory.
  chmodSync(root, 0o755);
  const dataDir = join(root, 'data');
  let upstream: FakeUpstream;
  let gateway: NpmStart | undefined;
  let url = '';
  let apiKey = '';

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    const configPath = join(root, 'gateway.yaml');
    writeFileSync(configPath, catalog(upstream));
    gateway = startNpmStart({ GATEWAY_DATA_DIR: dataDir, GATEWAY_CONFIG: configPath, MEMORY_E2E_KEY: 'memory-upstream-key', LOG_LEVEL: 'warn' });
    ({ url, apiKey } = await npmStartBanner(gateway, 120_000));
  }, 150_000);

  afterAll(async () => {
    if (gateway && gateway.child.exitCode === null && gateway.child.signalCode === null) {
      gateway.child.kill('SIGTERM');
      await Promise.race([gateway.exited, pause(20_000)]);
      if (gateway.child.exitCode === null && gateway.child.signalCode === null) gateway.child.kill('SIGKILL');
    }
    await stopProcessesMentioning(join(dataDir, 'postgres'));
    await upstream?.close();
    rmSync(root, { recursive: true, force: true });
  }, 60_000);

  it(`${UPLOADS} concurrent ${FILE_BYTES / MiB} MiB transcription uploads keep the node process within idle + 250 MB and give it back`, async () => {
    const pid = gateway!.child.pid!;
    const file = pcmWav((FILE_BYTES - 44) / 32_000);
    const started = rssOf(pid);
    // Warm-up: one upload end to end, so code paths and pools that load lazily are in the idle figure.
    const warm = await upload(url, apiKey, file);
    expect(warm.status, warm.body).toBe(200);
    upstream.reset();
    await pause(3_000);
    const idle = rssOf(pid);
    let peak = idle;
    const sampler = setInterval(() => { peak = Math.max(peak, rssOf(pid)); }, 50);
    const answers = await Promise.all(Array.from({ length: UPLOADS }, () => upload(url, apiKey, file)));
    clearInterval(sampler);
    peak = Math.max(peak, rssOf(pid));
    expect(answers.map((answer) => answer.status), answers.find((answer) => answer.status !== 200)?.body).toEqual(Array(UPLOADS).fill(200));
    // Every provider call got the whole file.
    expect(upstream.requests.length).toBe(UPLOADS);
    await pause(5_000);
    const after = rssOf(pid);
    const figures = `started ${(started / MiB).toFixed(0)} MiB, idle ${(idle / MiB).toFixed(0)} MiB, peak ${(peak / MiB).toFixed(0)} MiB, after ${(after / MiB).toFixed(0)} MiB`;
    console.log(`npm start upload memory: ${figures}`);
    expect(peak - idle, figures).toBeLessThanOrEqual(250 * 1e6);
    expect(after - idle, figures).toBeLessThanOrEqual(100 * 1e6);
  }, 300_000);
});
