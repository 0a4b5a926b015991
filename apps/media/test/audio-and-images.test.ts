import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createClient, ErrorReason, ffmpegPath, GatewayError, GrpcStatus } from '@gateway/platform';
import { MediaServiceClient, MediaServiceService } from '@gateway/proto';
import { createTestDatabase, testLogger, type TestDatabase } from '@gateway/testing';
import { sniffContainer, startMediaService } from '../src/index.js';

function ffmpeg(args: string[], input?: Uint8Array): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpegPath(), ['-hide_banner', '-nostdin', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => { err += chunk.toString(); });
    child.on('close', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(err.slice(-1000)))));
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ? Buffer.from(input) : undefined);
  });
}

/** A 440 Hz tone of `seconds` in a container made by ffmpeg (m4a through a temp-free fragmented mp4). */
const CONTAINERS: Record<string, string[]> = {
  wav: ['-c:a', 'pcm_s16le', '-f', 'wav'],
  mp3: ['-c:a', 'libmp3lame', '-f', 'mp3'],
  flac: ['-c:a', 'flac', '-f', 'flac'],
  ogg: ['-c:a', 'libopus', '-f', 'ogg'],
  webm: ['-c:a', 'libopus', '-f', 'webm'],
  mp4: ['-c:a', 'aac', '-movflags', 'frag_keyframe+empty_moov', '-f', 'mp4'],
};
const tone = (seconds: number, container: string) =>
  ffmpeg(['-f', 'lavfi', '-i', `sine=frequency=440:sample_rate=48000:duration=${seconds}`, '-ac', '1', ...CONTAINERS[container]!, 'pipe:1']);

async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(GatewayError);
  return error as GatewayError;
}

describe('media service: ConvertAudio with ffmpeg, and the hosted image store', () => {
  let database: TestDatabase;
  let service: Awaited<ReturnType<typeof startMediaService>>;
  let client: ReturnType<typeof createClient<MediaServiceClient>>;

  beforeAll(async () => {
    database = await createTestDatabase();
    service = await startMediaService({
      listenAddress: '127.0.0.1:0',
      logger: testLogger('media'),
      databaseUrl: database.url,
      audioLimits: { maxInputBytes: 2 * 1024 * 1024 },
      imageHosting: { ttlSeconds: 60, maxBytes: 1024 * 1024 },
    });
    client = createClient(MediaServiceClient, MediaServiceService, service.address, { maxAttempts: 1 });
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await service?.stop();
    await database?.drop();
  });

  it.each(Object.keys(CONTAINERS))('detects %s and measures its length', async (container) => {
    const audio = await tone(2, container);
    const probed = await client.convertAudio({ data: audio, targetFormat: '', filename: '' });
    expect(probed.sourceFormat).toBe(container);
    expect(probed.data.length).toBe(0);
    // Lossy encoders pad a few frames; a wav is exact.
    expect(Math.abs(probed.durationMs - 2000)).toBeLessThanOrEqual(container === 'wav' ? 0 : 80);
  });

  it.each([['webm', 'wav'], ['ogg', 'mp3'], ['mp4', 'wav'], ['flac', 'mp3']])('converts %s into %s that decodes, of the same length', async (source, target) => {
    const converted = await client.convertAudio({ data: await tone(1.5, source), targetFormat: target, filename: '' });
    expect(converted.contentType).toBe(target === 'wav' ? 'audio/wav' : 'audio/mpeg');
    expect(sniffContainer(converted.data)).toBe(target);
    const again = await client.convertAudio({ data: converted.data, targetFormat: '', filename: '' });
    expect(Math.abs(again.durationMs - 1500)).toBeLessThanOrEqual(80);
    await expect(ffmpeg(['-v', 'error', '-i', 'pipe:0', '-f', 'null', '-'], converted.data)).resolves.toBeDefined();
  });

  it('refuses what is not audio, corrupt audio and an oversized file, never with INTERNAL', async () => {
    const notAudio = await rejection(client.convertAudio({ data: Buffer.from('hello, this is text'), targetFormat: 'wav', filename: 'notes.txt' }));
    expect([notAudio.status, notAudio.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST]);
    const corrupt = Buffer.concat([Buffer.from('OggS'), Buffer.alloc(4_000, 7)]);
    const broken = await rejection(client.convertAudio({ data: corrupt, targetFormat: 'wav', filename: '' }));
    expect([broken.status, broken.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST]);
    const large = await rejection(client.convertAudio({ data: Buffer.alloc(3 * 1024 * 1024, 1), targetFormat: 'wav', filename: '' }));
    expect(large.reason).toBe(ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE);
    const target = await rejection(client.convertAudio({ data: await tone(0.5, 'wav'), targetFormat: 'midi', filename: '' }));
    expect(target.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
  });

  it('stores an image under an unguessable id, answers the same id for a retried store, and serves it back', async () => {
    const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
    const stored = await client.storeImage({ accountId: 'acct-1', data: png, contentType: 'image/png', idempotencyKey: 'req-1:0' });
    expect(stored.imageId).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(stored.path).toBe(`/v1/images/files/${stored.imageId}`);
    expect(Number(stored.expiresAt) - Date.now() / 1000).toBeGreaterThan(50);
    const retried = await client.storeImage({ accountId: 'acct-1', data: png, contentType: 'image/png', idempotencyKey: 'req-1:0' });
    expect(retried.imageId).toBe(stored.imageId);
    const other = await client.storeImage({ accountId: 'acct-1', data: png, contentType: 'image/png', idempotencyKey: 'req-1:1' });
    expect(other.imageId).not.toBe(stored.imageId);
    const served = await client.getImage({ imageId: stored.imageId });
    expect(Buffer.from(served.data).equals(png)).toBe(true);
    expect(served.contentType).toBe('image/png');
    const unknown = await rejection(client.getImage({ imageId: 'A'.repeat(22) }));
    expect(unknown.status).toBe(GrpcStatus.NOT_FOUND);
  });

  it('refuses an oversized image and a type it does not host', async () => {
    const large = await rejection(client.storeImage({ accountId: 'a', data: Buffer.alloc(1024 * 1024 + 1), contentType: 'image/png', idempotencyKey: '' }));
    expect(large.reason).toBe(ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE);
    const svg = await rejection(client.storeImage({ accountId: 'a', data: Buffer.from('<svg/>'), contentType: 'image/svg+xml', idempotencyKey: '' }));
    expect(svg.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
  });

  it('answers NOT_FOUND past the expiry', async () => {
    const stored = await client.storeImage({ accountId: 'acct-2', data: Buffer.from('gif-bytes'), contentType: 'image/gif', idempotencyKey: 'x' });
    const sql = new pg.Client({ connectionString: database.url });
    await sql.connect();
    try {
      await sql.query(`update media.images set expires_at = now() - interval '1 second' where id = $1`, [stored.imageId]);
      const expired = await rejection(client.getImage({ imageId: stored.imageId }));
      expect(expired.status).toBe(GrpcStatus.NOT_FOUND);
    } finally {
      await sql.end();
    }
  });
});
