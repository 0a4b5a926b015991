import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorReason, GatewayError, GrpcStatus, errors, ffmpegPath, readWavLayout, sniffAudioContainer, type AudioContainer } from '@gateway/platform';

/** Bounds of ConvertAudio, and their defaults. */
export const DEFAULT_AUDIO_LIMITS = {
  /** Largest input accepted (the edge's per-file bound). */
  maxInputBytes: 20 * 1024 * 1024,
  /** One ffmpeg run may take this long; past it the call is refused (413), never a 5xx. */
  timeoutMs: 60_000,
  /** ffmpeg processes at once; the rest wait their turn (a cancelled call leaves the queue). */
  concurrency: 2,
  /** Longest audio accepted: decoding stops just past it and the call is refused (413). */
  maxDurationMs: 30 * 60_000,
  /**
   * Largest output one conversion may produce (413 past it; ffmpeg is stopped at once). What the provider is
   * sent travels media -> edge -> routing as one gRPC message, and every hop reads and sends at most 48 MiB
   * (libs/platform grpc client/server): 40 MiB leaves room for the rest of the message. A decoded container
   * (16 kHz mono 16-bit wav, 32,000 bytes a second) therefore stops at about 21.8 minutes with a 413; mp3
   * (remuxed) and consistent PCM wav (sent as they are) stay within the 20 MiB upload bound.
   */
  maxOutputBytes: 40 * 1024 * 1024,
};
export type AudioLimits = typeof DEFAULT_AUDIO_LIMITS;

/**
 * The target that prepares an upload for a transcription provider: a PCM WAV with a consistent header goes
 * as it is (no data answered; its length exact from the header), mp3 frames are remuxed as they are, and
 * anything else becomes 16 kHz mono 16-bit PCM wav. The length answered is the length of what is sent.
 */
export const TRANSCRIPTION_TARGET = 'transcription';

/** Output container of each target format, with its content type. */
const TARGETS: Readonly<Record<string, { args: readonly string[]; contentType: string }>> = {
  mp3: { args: ['-c:a', 'libmp3lame', '-q:a', '4', '-f', 'mp3'], contentType: 'audio/mpeg' },
  wav: { args: ['-c:a', 'pcm_s16le', '-f', 'wav'], contentType: 'audio/wav' },
  flac: { args: ['-c:a', 'flac', '-f', 'flac'], contentType: 'audio/flac' },
  opus: { args: ['-c:a', 'libopus', '-f', 'ogg'], contentType: 'audio/ogg' },
  aac: { args: ['-c:a', 'aac', '-f', 'adts'], contentType: 'audio/aac' },
  pcm: { args: ['-c:a', 'pcm_s16le', '-ar', '24000', '-ac', '1', '-f', 's16le'], contentType: 'audio/pcm' },
};
/** What a transcription provider is sent when the upload cannot go as it is. */
const TRANSCRIPTION_WAV = { args: ['-c:a', 'pcm_s16le', '-ar', '16000', '-ac', '1', '-f', 'wav'], contentType: 'audio/wav' } as const;
const TRANSCRIPTION_MP3 = { args: ['-c:a', 'copy', '-f', 'mp3'], contentType: 'audio/mpeg' } as const;

/**
 * The ffmpeg demuxer each sniffed container is read with. Forced with `-f`: ffmpeg never probes the
 * content for another (an HLS or concat playlist would make it open the files and URLs it names).
 */
const DEMUXERS: Readonly<Record<AudioContainer, readonly string[]>> = {
  wav: ['-f', 'wav'],
  flac: ['-f', 'flac'],
  ogg: ['-f', 'ogg'],
  webm: ['-f', 'matroska'],
  // mov could open external tracks (data references); they are off by default, and said so here.
  mp4: ['-f', 'mov', '-enable_drefs', '0'],
  mp3: ['-f', 'mp3'],
  aac: ['-f', 'aac'],
};

const READABLE = 'mp3, wav, flac, ogg, webm, mp4/m4a, aac';

/** The container by its magic bytes (a file name never decides). */
export function sniffContainer(data: Uint8Array): AudioContainer | undefined {
  return sniffAudioContainer(data);
}

/** Exact duration of a PCM WAV whose header is consistent (all data chunks); undefined otherwise. */
export function wavDurationMs(data: Uint8Array): number | undefined {
  const read = readWavLayout(data);
  return 'layout' in read ? read.layout.durationMs : undefined;
}

/** The last `time=HH:MM:SS.ss` of ffmpeg's progress output, in ms. */
function lastProgressTimeMs(stderr: string): number | undefined {
  const matches = [...stderr.matchAll(/time=\s*(\d+):(\d\d):(\d\d(?:\.\d+)?)/g)];
  const last = matches.at(-1);
  if (!last) return undefined;
  return Math.round((Number(last[1]) * 3600 + Number(last[2]) * 60 + Number(last[3])) * 1000);
}

const cancelled = () => new GatewayError(GrpcStatus.CANCELLED, ErrorReason.ERROR_REASON_UNSPECIFIED, 'the caller cancelled the conversion');
const tooLarge = (message: string) => new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, message, { param: 'file' });

/**
 * A counting semaphore: at most `limit` holders, the rest queue in order. A freed slot is handed to the
 * next waiter directly; a waiter whose signal aborts leaves the queue (it never starts).
 */
export class Slots {
  private running = 0;
  private readonly waiting: { grant(): void }[] = [];
  constructor(private readonly limit: number) {}

  get queued(): number {
    return this.waiting.length;
  }

  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(cancelled());
    if (this.running < this.limit) {
      this.running++;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(this.releaser());
        },
      };
      const onAbort = () => {
        const index = this.waiting.indexOf(waiter);
        if (index >= 0) this.waiting.splice(index, 1);
        reject(cancelled());
      };
      this.waiting.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next.grant();
      else this.running--;
    };
  }
}

export interface ConvertedAudio {
  data: Uint8Array;
  contentType: string;
  durationMs: number;
  sourceFormat: string;
}

/**
 * ConvertAudio: detects the container by its magic bytes, measures the length and, when a target is
 * named, re-encodes with ffmpeg. ffmpeg reads a temporary file (an mp4/m4a keeps its index at the end,
 * which a pipe cannot seek to) with its demuxer forced and only the `file` protocol allowed. Bounded in
 * size, duration, output, time and concurrency; a cancelled call leaves the queue or kills ffmpeg.
 */
export class AudioConverter {
  private readonly slots: Slots;

  constructor(private readonly limits: AudioLimits = DEFAULT_AUDIO_LIMITS) {
    this.slots = new Slots(limits.concurrency);
  }

  async convert(data: Uint8Array, targetFormat: string, _filename: string, signal?: AbortSignal): Promise<ConvertedAudio> {
    if (data.length === 0) throw errors.invalidRequest('the audio is empty', 'file');
    if (data.length > this.limits.maxInputBytes) throw tooLarge(`the audio is larger than ${this.limits.maxInputBytes} bytes`);
    const forTranscription = targetFormat === TRANSCRIPTION_TARGET;
    const named = targetFormat && !forTranscription ? TARGETS[targetFormat] : undefined;
    if (targetFormat && !forTranscription && !named) throw errors.invalidRequest(`unknown target format ${JSON.stringify(targetFormat)} (mp3, wav, flac, opus, aac, pcm)`, 'target_format');
    const sourceFormat = sniffContainer(data);
    if (!sourceFormat) throw errors.invalidRequest(`file: not audio in a container the gateway reads (${READABLE}), judged by its bytes`, 'file');
    let target: { args: readonly string[]; contentType: string } | undefined = named;
    if (sourceFormat === 'wav' && !named) {
      // A consistent PCM header is the length exactly; with one data chunk the file can go as it is.
      const read = readWavLayout(data);
      if ('layout' in read && (!forTranscription || read.layout.dataChunks === 1)) {
        this.checkDuration(read.layout.durationMs);
        return { data: new Uint8Array(), contentType: forTranscription ? 'audio/wav' : '', durationMs: read.layout.durationMs, sourceFormat };
      }
    }
    if (forTranscription) target = sourceFormat === 'mp3' ? TRANSCRIPTION_MP3 : TRANSCRIPTION_WAV;
    const release = await this.slots.acquire(signal);
    let directory: string | undefined;
    try {
      if (signal?.aborted) throw cancelled();
      directory = await mkdtemp(join(tmpdir(), 'gateway-audio-'));
      const input = join(directory, `input.${sourceFormat}`);
      await writeFile(input, data);
      // Only the first audio stream, no metadata, and decoding stops a second past the longest accepted.
      const limit = ['-t', String(Math.ceil(this.limits.maxDurationMs / 1000) + 1)];
      const output = target ? ['-map_metadata', '-1', ...limit, ...target.args, 'pipe:1'] : [...limit, '-f', 'null', '-'];
      const args = ['-hide_banner', '-nostdin', '-protocol_whitelist', 'file', ...DEMUXERS[sourceFormat], '-i', input, '-map', '0:a:0', '-vn', '-sn', '-dn', ...output];
      const { stdout, stderr } = await this.run(args, directory, signal);
      const wavOut = target?.contentType === 'audio/wav' ? readWavLayout(stdout) : undefined;
      const durationMs = wavOut && 'layout' in wavOut ? wavOut.layout.durationMs : lastProgressTimeMs(stderr);
      if (durationMs === undefined || (target && stdout.length === 0)) throw errors.invalidRequest('file: the audio could not be decoded', 'file');
      this.checkDuration(durationMs);
      return { data: target ? stdout : new Uint8Array(), contentType: target?.contentType ?? '', durationMs, sourceFormat };
    } finally {
      release();
      if (directory) await rm(directory, { recursive: true, force: true });
    }
  }

  private checkDuration(durationMs: number): void {
    if (durationMs > this.limits.maxDurationMs) throw tooLarge(`file: the audio is longer than ${this.limits.maxDurationMs / 1000} s`);
  }

  private run(args: string[], directory: string, signal?: AbortSignal): Promise<{ stdout: Buffer; stderr: string }> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(cancelled());
      const child = spawn(ffmpegPath(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      let outBytes = 0;
      let stderr = '';
      let failure: Error | undefined;
      const stop = (error: Error) => {
        failure ??= error;
        child.kill('SIGKILL');
      };
      const timer = setTimeout(() => stop(tooLarge(`file: audio too long to convert (more than ${this.limits.timeoutMs / 1000} s of work)`)), this.limits.timeoutMs);
      const onAbort = () => stop(cancelled());
      signal?.addEventListener('abort', onAbort, { once: true });
      child.stdout.on('data', (chunk: Buffer) => {
        outBytes += chunk.length;
        if (outBytes > this.limits.maxOutputBytes) stop(tooLarge(`file: the converted audio is larger than ${this.limits.maxOutputBytes} bytes`));
        else if (!failure) out.push(chunk);
      });
      // Only the tail matters (the last progress line, the error); the head is the banner.
      child.stderr.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-8_192); });
      child.once('error', (error) => stop(error));
      child.once('close', (code) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (failure) return reject(failure);
        if (code !== 0) {
          const line = stderr.trim().split('\n').filter((text) => !text.startsWith('size=')).at(-1) ?? `exit ${code}`;
          // ffmpeg names its input by path: the temporary directory is never shown to a caller.
          const reason = line.replaceAll(directory, '').replace(/\/?input\.[a-z0-9]+/g, 'file').slice(0, 300);
          return reject(errors.invalidRequest(`file: the audio could not be decoded: ${reason}`, 'file'));
        }
        resolve({ stdout: Buffer.concat(out), stderr });
      });
    });
  }
}
