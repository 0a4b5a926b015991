import { watch, type FSWatcher } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readWavLayout } from '@gateway/platform';
import { pcmWav, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { ctlJson } from './configured-stack.js';
import { MEDIA_PRICES, makeAudio, mediaCatalog, pricedAudioMs, startMediaHarness, type MediaHarness } from './media-e2e-harness.js';

// Issue 29 items 1, 4 and 6 end to end: the length charged for a transcription is the length the provider
// receives (forged WAV headers), playlists posing as audio never make the gateway read a server file, and a
// key that cannot pay gets its 402 before any ffmpeg runs. Charges are read from the ledger's own rows.


describe('transcription: billed length, server files, payment before ffmpeg', () => {
  let upstream: FakeUpstream;
  let harness: MediaHarness;
  let temp: string;
  let scratch: string;
  let previousTmpdir: string | undefined;
  let watcher: FSWatcher;
  /** The media service runs in this process: every ffmpeg run makes a `gateway-audio-*` directory here. */
  const ffmpegRuns = new Set<string>();

  beforeAll(async () => {
    temp = await mkdtemp(join(tmpdir(), 'audio-hostile-e2e-tmp-'));
    scratch = await mkdtemp(join(tmpdir(), 'audio-hostile-e2e-files-'));
    previousTmpdir = process.env.TMPDIR;
    process.env.TMPDIR = temp;
    watcher = watch(temp, (_event, name) => {
      if (name?.startsWith('gateway-audio-')) ffmpegRuns.add(name);
    });
    upstream = await startFakeUpstream();
    harness = await startMediaHarness(mediaCatalog(upstream, 'http://127.0.0.1:9/v1'));
  }, 120_000);

  afterAll(async () => {
    watcher?.close();
    await harness?.stop();
    await upstream?.close();
    if (previousTmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previousTmpdir;
    await rm(temp, { recursive: true, force: true });
    await rm(scratch, { recursive: true, force: true });
  });

  const transcribe = (file: Buffer, filename: string, apiKey = harness.apiKey) => {
    const form = new FormData();
    form.set('model', 'cloud/transcribe');
    form.set('file', new Blob([file]), filename);
    return fetch(`${harness.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` }, body: form });
  };
  const uploads = () => upstream.requests.filter((request) => request.path === '/v1/audio/transcriptions');
  const sentFile = () => uploads().at(-1)!.parts!.find((part) => part.name === 'file')!;
  // 60 s at 0.36 credits per hour: 0.006 credits.
  const sixtySeconds = pricedAudioMs(60_000, MEDIA_PRICES.transcribeHour);

  it('charges an honest 60 s WAV 0.006 credits, sending it as it is', async () => {
    const wav = pcmWav(60);
    const response = await transcribe(wav, 'honest.wav');
    expect(response.status).toBe(200);
    expect(Buffer.from(sentFile().data).equals(wav)).toBe(true);
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_audio_ms)).toBe(60_000);
    expect(charge.cost_pico).toBe(6_000_000_000n);
    expect(charge.cost_pico).toBe(sixtySeconds);
  });

  it('charges a 60 s WAV whose byte rate says 0xFFFFFFFF for the 60 s the provider receives', async () => {
    const forged = pcmWav(60);
    forged.writeUInt32LE(0xffffffff, 28);
    const response = await transcribe(forged, 'forged.wav');
    expect(response.status).toBe(200);
    // The provider got a re-encoded wav whose own, consistent header says 60 s.
    const sent = readWavLayout(sentFile().data);
    expect(sent).toMatchObject({ layout: { durationMs: 60_000, dataChunks: 1 } });
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_audio_ms)).toBe(60_000);
    expect(charge.cost_pico).toBe(sixtySeconds);
  });

  it('charges a 2-byte data chunk followed by a 60 s one for all of it', async () => {
    const wav = pcmWav(60);
    const tiny = Buffer.concat([Buffer.from('data', 'latin1'), Buffer.from([2, 0, 0, 0, 0, 0])]);
    const split = Buffer.concat([wav.subarray(0, 36), tiny, wav.subarray(36)]);
    split.writeUInt32LE(split.length - 8, 4);
    const response = await transcribe(split, 'split.wav');
    expect(response.status).toBe(200);
    expect(readWavLayout(sentFile().data)).toMatchObject({ layout: { durationMs: 60_000, dataChunks: 1 } });
    const charge = await harness.charge(response.headers.get('x-request-id')!);
    expect(Number(charge.input_audio_ms)).toBe(60_000);
    expect(charge.cost_pico).toBe(sixtySeconds);
  });

  it('refuses an HLS playlist or concat script naming a server file with 400 naming `file`: nothing read, sent or charged', async () => {
    const secret = join(scratch, 'server-secret.wav');
    await writeFile(secret, pcmWav(2));
    const before = uploads().length;
    const runs = ffmpegRuns.size;
    const attempts: [string, string][] = [
      [`#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n${secret}\n#EXT-X-ENDLIST\n`, 'list.ogg'],
      [`#EXTM3U\n#EXTINF:10,\nfile://${secret}\n#EXT-X-ENDLIST\n`, 'list.mp3'],
      [`ffconcat version 1.0\nfile '${secret}'\n`, 'clip.wav'],
    ];
    for (const [text, filename] of attempts) {
      const response = await transcribe(Buffer.from(text), filename);
      expect(response.status).toBe(400);
      const body = (await response.json()) as { error: { type: string; param?: string; message: string } };
      expect(body.error.type).toBe('invalid_request_error');
      expect(body.error.param).toMatch(/file$/);
      expect(body.error.message).not.toMatch(/secret|\/tmp/);
      expect(await harness.chargesOf(response.headers.get('x-request-id')!)).toBe(0);
    }
    expect(uploads().length).toBe(before);
    expect(ffmpegRuns.size).toBe(runs);
  });

  it('answers a key with no credits 402 before any ffmpeg runs; a key with credits converts', async () => {
    const account = await ctlJson(harness.base.stack, 'accounts', 'create', '--name', 'broke', '--credits', '0', '--tier', 'tier-1', '--json');
    const brokeKey = (await ctlJson(harness.base.stack, 'keys', 'create', account.account_id!, '--name', 'broke-key', '--json')).api_key!;
    const webm = await makeAudio(2, 'webm');
    const runs = ffmpegRuns.size;
    const before = uploads().length;
    const refused = await transcribe(webm, 'clip.webm', brokeKey);
    expect(refused.status).toBe(402);
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBe('insufficient_quota');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(ffmpegRuns.size).toBe(runs);
    expect(uploads().length).toBe(before);
    // The same upload with credits is converted (the observation above would have seen it).
    const paid = await transcribe(webm, 'clip.webm');
    expect(paid.status).toBe(200);
    expect(ffmpegRuns.size).toBe(runs + 1);
    const charge = await harness.charge(paid.headers.get('x-request-id')!);
    expect(charge.cost_pico).toBe(pricedAudioMs(charge.input_audio_ms as string, MEDIA_PRICES.transcribeHour));
    expect(Math.abs(Number(charge.input_audio_ms) - 2000)).toBeLessThan(100);
  });
});
