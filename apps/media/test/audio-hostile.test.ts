import { spawn } from 'node:child_process';
import { watch, type FSWatcher } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, ErrorReason, ffmpegPath, GatewayError, GrpcStatus, readWavLayout, sniffAudioContainer } from '@gateway/platform';
import { MediaServiceClient, MediaServiceService } from '@gateway/proto';
import { pcmWav, testLogger } from '@gateway/testing';
import { startMediaService } from '../src/index.js';
import { Slots } from '../src/audio-convert.js';

// Issue 29 items 1, 4, 6 and 7 at the media service: forged WAV headers, playlists posing as audio, an
// ID3-prefixed FLAC bomb, and conversions whose callers left.

function ffmpeg(args: string[]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpegPath(), ['-hide_banner', '-nostdin', '-v', 'error', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => { err += chunk.toString(); });
    child.on('close', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(err.slice(-1000)))));
  });
}


/** The same WAV with a 2-byte data chunk placed before its real one. */
export function splitDataWav(wav: Buffer): Buffer {
  const tiny = Buffer.concat([Buffer.from('data', 'latin1'), Buffer.from([2, 0, 0, 0]), Buffer.from([0, 0])]);
  const out = Buffer.concat([wav.subarray(0, 36), tiny, wav.subarray(36)]);
  out.writeUInt32LE(out.length - 8, 4);
  return out;
}

/** An ID3v2.4 tag of `size` padding bytes. */
function id3Tag(size = 64): Buffer {
  const tag = Buffer.alloc(10 + size);
  tag.write('ID3', 0, 'latin1');
  tag[3] = 4;
  tag[6] = (size >> 21) & 0x7f;
  tag[7] = (size >> 14) & 0x7f;
  tag[8] = (size >> 7) & 0x7f;
  tag[9] = size & 0x7f;
  return tag;
}

async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(GatewayError);
  return error as GatewayError;
}

describe('reading WAV headers and sniffing containers (pure)', () => {
  const wav = pcmWav(60);

  it('measures an honest WAV exactly and refuses a byte rate that disagrees with its layout', () => {
    expect(readWavLayout(wav)).toMatchObject({ layout: { durationMs: 60_000, dataChunks: 1, sampleRate: 16_000, blockAlign: 2 } });
    const forged = Buffer.from(wav);
    forged.writeUInt32LE(0xffffffff, 28);
    expect(readWavLayout(forged)).toEqual({ problem: 'the byte rate is not sample rate × block align' });
    const badAlign = Buffer.from(wav);
    badAlign.writeUInt16LE(1, 32);
    expect('problem' in readWavLayout(badAlign)).toBe(true);
    const compressed = Buffer.from(wav);
    compressed.writeUInt16LE(0x55, 20);
    expect(readWavLayout(compressed)).toEqual({ problem: 'codec 85 is not PCM' });
  });

  it('counts every data chunk (a 2-byte chunk before the real one hides nothing)', () => {
    expect(readWavLayout(splitDataWav(wav))).toMatchObject({ layout: { durationMs: 60_000, dataChunks: 2, dataBytes: 1_920_002 } });
  });

  it('judges the container by its bytes only: a playlist named .ogg is not audio; ID3 then FLAC is FLAC', () => {
    expect(sniffAudioContainer(Buffer.from('#EXTM3U\n#EXTINF:10,\n/srv/x.wav\n'))).toBeUndefined();
    expect(sniffAudioContainer(Buffer.from('ffconcat version 1.0\nfile /srv/x.wav\n'))).toBeUndefined();
    expect(sniffAudioContainer(Buffer.concat([id3Tag(), Buffer.from('fLaC\0\0\0\x22')]))).toBe('flac');
    expect(sniffAudioContainer(Buffer.concat([id3Tag(), Buffer.from([0xff, 0xfb, 0x90, 0x64])]))).toBe('mp3');
    expect(sniffAudioContainer(Buffer.concat([id3Tag(), Buffer.from('#EXTM3U\n')]))).toBeUndefined();
  });
});

describe('media service: hostile audio', () => {
  let scratch: string;
  let temp: string;
  let previousTmpdir: string | undefined;
  let watcher: FSWatcher;
  /** Every ffmpeg run makes one `gateway-audio-*` directory in the (test's own) temporary directory. */
  const ffmpegRuns = new Set<string>();
  let service: Awaited<ReturnType<typeof startMediaService>>;
  let client: ReturnType<typeof createClient<MediaServiceClient>>;
  let bomb: Buffer;

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'audio-hostile-scratch-'));
    temp = await mkdtemp(join(tmpdir(), 'audio-hostile-tmp-'));
    previousTmpdir = process.env.TMPDIR;
    process.env.TMPDIR = temp;
    watcher = watch(temp, (_event, name) => {
      if (name?.startsWith('gateway-audio-')) ffmpegRuns.add(name);
    });
    // 20 minutes of 48 kHz stereo silence in ~35 KB, behind an ID3 tag: it decodes to 230 MB of PCM.
    const flac = await ffmpeg(['-f', 'lavfi', '-i', 'anullsrc=r=48000:cl=stereo:nb_samples=32768', '-t', '1200', '-c:a', 'flac', '-frame_size', '32768', '-f', 'flac', 'pipe:1']);
    bomb = Buffer.concat([id3Tag(), flac]);
    service = await startMediaService({
      listenAddress: '127.0.0.1:0',
      logger: testLogger('media'),
      // One ffmpeg at a time (the queue is observable), 2 minutes of audio at most.
      audioLimits: { concurrency: 1, maxDurationMs: 120_000, timeoutMs: 30_000 },
    });
    client = createClient(MediaServiceClient, MediaServiceService, service.address, { maxAttempts: 1 });
  }, 120_000);

  afterAll(async () => {
    watcher?.close();
    if (previousTmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previousTmpdir;
    client?.close();
    await service?.stop();
    await rm(scratch, { recursive: true, force: true });
    await rm(temp, { recursive: true, force: true });
  });

  it('prepares a forged-byte-rate WAV for transcription as what a decoder hears: 60 s, re-encoded', async () => {
    const forged = pcmWav(60);
    forged.writeUInt32LE(0xffffffff, 28);
    const prepared = await client.convertAudio({ data: forged, targetFormat: 'transcription', filename: 'a.wav' });
    expect(prepared.contentType).toBe('audio/wav');
    expect(prepared.data.length).toBeGreaterThan(1_900_000);
    expect(prepared.durationMs).toBe(60_000);
    expect(readWavLayout(prepared.data)).toMatchObject({ layout: { durationMs: 60_000, sampleRate: 16_000, channels: 1 } });
    // Measuring alone decodes it too (the header is not believed).
    expect((await client.convertAudio({ data: forged, targetFormat: '', filename: '' })).durationMs).toBe(60_000);
  });

  it('sends a 2-byte data chunk followed by a 60 s one as one 60 s wav', async () => {
    const prepared = await client.convertAudio({ data: splitDataWav(pcmWav(60)), targetFormat: 'transcription', filename: '' });
    expect(prepared.data.length).toBeGreaterThan(0);
    expect(prepared.durationMs).toBe(60_000);
  });

  it('lets an honest PCM WAV go as it is, measured exactly from its header, without ffmpeg', async () => {
    const runs = ffmpegRuns.size;
    const prepared = await client.convertAudio({ data: pcmWav(60), targetFormat: 'transcription', filename: 'a.wav' });
    expect([prepared.data.length, prepared.contentType, prepared.durationMs]).toEqual([0, 'audio/wav', 60_000]);
    expect(ffmpegRuns.size).toBe(runs);
  });

  it('refuses playlists and concat scripts naming server files, whatever their name, without running ffmpeg or echoing paths', async () => {
    const secret = join(scratch, 'secret.wav');
    await writeFile(secret, pcmWav(2));
    const runs = ffmpegRuns.size;
    const attempts = [
      `#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n${secret}\n#EXT-X-ENDLIST\n`,
      `#EXTM3U\n#EXTINF:10,\nfile://${secret}\n#EXT-X-ENDLIST\n`,
      `ffconcat version 1.0\nfile '${secret}'\n`,
    ];
    for (const text of attempts) {
      for (const filename of ['list.ogg', 'list.wav', 'list.m3u8']) {
        const refused = await rejection(client.convertAudio({ data: Buffer.from(text), targetFormat: 'transcription', filename }));
        expect([refused.status, refused.reason, refused.param]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST, 'file']);
        expect(refused.message).not.toMatch(/\/tmp|gateway-audio|secret/);
      }
    }
    expect(ffmpegRuns.size).toBe(runs);
  });

  it('never shows the temporary path when ffmpeg cannot decode a file', async () => {
    const corrupt = Buffer.concat([Buffer.from('OggS'), Buffer.alloc(4_000, 7)]);
    const refused = await rejection(client.convertAudio({ data: corrupt, targetFormat: 'transcription', filename: '' }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
    expect(refused.message).not.toMatch(/gateway-audio|\/tmp\//);
  });

  it('stops an ID3-prefixed FLAC bomb just past the longest audio accepted: 413 with its reason, fast', async () => {
    expect(bomb.length).toBeLessThan(100_000);
    const started = Date.now();
    const refused = await rejection(client.convertAudio({ data: bomb, targetFormat: 'transcription', filename: 'bomb.mp3' }));
    expect([refused.status, refused.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE]);
    expect(refused.message).toMatch(/longer than 120 s/);
    // Generous bound: decoding stops after ~2 minutes of audio instead of all 20 (the timeout is 30 s).
    expect(Date.now() - started).toBeLessThan(15_000);
  });

  it('answers the time limit as 413 "too long to convert", never a 5xx', async () => {
    const slow = await startMediaService({ listenAddress: '127.0.0.1:0', logger: testLogger('media-slow'), audioLimits: { maxDurationMs: 3_600_000, timeoutMs: 150 } });
    const slowClient = createClient(MediaServiceClient, MediaServiceService, slow.address, { maxAttempts: 1 });
    try {
      const refused = await rejection(slowClient.convertAudio({ data: bomb, targetFormat: 'transcription', filename: '' }));
      expect([refused.status, refused.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE]);
      expect(refused.message).toMatch(/too long to convert/);
    } finally {
      slowClient.close();
      await slow.stop();
    }
  });

  it('takes a queued conversion whose caller left off the queue: it never starts ffmpeg', async () => {
    // The output bound is lifted too: at the default 40 MiB the three hours were refused (413) after ~22 minutes of
    // audio, which a quiet machine decoded inside the test's 300 ms, freeing the slot early (CI: status 3, not 1).
    const long = await startMediaService({ listenAddress: '127.0.0.1:0', logger: testLogger('media-long'), audioLimits: { concurrency: 1, maxDurationMs: 4 * 3_600_000, maxOutputBytes: 1024 * 1024 * 1024, timeoutMs: 60_000 } });
    const longClient = createClient(MediaServiceClient, MediaServiceService, long.address, { maxAttempts: 1 });
    // The running conversion must outlast the test's two 150 ms waits: 20 minutes of silence decoded in
    // under 300 ms on a quiet machine, freeing the slot for a queued caller before its cancellation came
    // (CI: 2 ffmpeg runs). Three hours of it take ten times as long.
    const flac = await ffmpeg(['-f', 'lavfi', '-i', 'anullsrc=r=48000:cl=stereo:nb_samples=32768', '-t', '10800', '-c:a', 'flac', '-frame_size', '32768', '-f', 'flac', 'pipe:1']);
    const bomb = Buffer.concat([id3Tag(), flac]);
    try {
      const runs = ffmpegRuns.size;
      const first = new AbortController();
      const running = rejection(longClient.convertAudio({ data: bomb, targetFormat: 'transcription', filename: '' }, { signal: first.signal }));
      await new Promise((resolve) => setTimeout(resolve, 150));
      const queued = [new AbortController(), new AbortController()];
      const waiting = queued.map((controller) => rejection(longClient.convertAudio({ data: bomb, targetFormat: 'transcription', filename: '' }, { signal: controller.signal })));
      await new Promise((resolve) => setTimeout(resolve, 150));
      for (const controller of queued) controller.abort();
      for (const error of await Promise.all(waiting)) expect(error.status).toBe(GrpcStatus.CANCELLED);
      first.abort();
      expect((await running).status).toBe(GrpcStatus.CANCELLED);
      // The queue is empty again: a new call starts at once and completes.
      const after = await longClient.convertAudio({ data: pcmWav(1), targetFormat: '', filename: '' });
      expect(after.durationMs).toBe(1_000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(ffmpegRuns.size - runs).toBe(1);
    } finally {
      longClient.close();
      await long.stop();
    }
  });
});

describe('Slots', () => {
  it('hands a freed slot to the next waiter, and a waiter whose signal aborts leaves the queue', async () => {
    const slots = new Slots(1);
    const release = await slots.acquire();
    const leaving = new AbortController();
    const order: string[] = [];
    const gone = slots.acquire(leaving.signal).then(() => order.push('gone'), () => order.push('cancelled'));
    const next = slots.acquire().then((free) => { order.push('next'); return free; });
    expect(slots.queued).toBe(2);
    leaving.abort();
    await gone;
    expect(slots.queued).toBe(1);
    release();
    (await next)();
    expect(order).toEqual(['cancelled', 'next']);
    await expect(slots.acquire(AbortSignal.abort())).rejects.toBeInstanceOf(GatewayError);
  });
});
