import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorReason, GatewayError, GrpcStatus, errors, ffmpegPath } from '@gateway/platform';

/** Bounds of ConvertAudio. */
export interface AudioLimits {
  /** Largest input accepted (the edge's per-file bound). */
  maxInputBytes: number;
  /** One ffmpeg run may take this long. */
  timeoutMs: number;
  /** ffmpeg processes at once; the rest wait their turn. */
  concurrency: number;
}

export const DEFAULT_AUDIO_LIMITS: AudioLimits = { maxInputBytes: 20 * 1024 * 1024, timeoutMs: 60_000, concurrency: 2 };

/** Output container of each target format, with its content type. */
const TARGETS: Readonly<Record<string, { args: readonly string[]; contentType: string }>> = {
  mp3: { args: ['-c:a', 'libmp3lame', '-q:a', '4', '-f', 'mp3'], contentType: 'audio/mpeg' },
  wav: { args: ['-c:a', 'pcm_s16le', '-f', 'wav'], contentType: 'audio/wav' },
  flac: { args: ['-c:a', 'flac', '-f', 'flac'], contentType: 'audio/flac' },
  opus: { args: ['-c:a', 'libopus', '-f', 'ogg'], contentType: 'audio/ogg' },
  aac: { args: ['-c:a', 'aac', '-f', 'adts'], contentType: 'audio/aac' },
  pcm: { args: ['-c:a', 'pcm_s16le', '-ar', '24000', '-ac', '1', '-f', 's16le'], contentType: 'audio/pcm' },
};

const EXTENSIONS: Readonly<Record<string, string>> = {
  mp3: 'mp3', mpga: 'mp3', mpeg: 'mp3', wav: 'wav', flac: 'flac', ogg: 'ogg', oga: 'ogg', opus: 'ogg', webm: 'webm', mp4: 'mp4', m4a: 'mp4', aac: 'aac',
};

/** The container by its magic bytes; the file name's extension only when the bytes say nothing. */
export function sniffContainer(data: Uint8Array, filename = ''): string | undefined {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const ascii = (start: number, end: number) => bytes.subarray(start, end).toString('latin1');
  if (ascii(0, 4) === 'RIFF' && ascii(8, 12) === 'WAVE') return 'wav';
  if (ascii(0, 4) === 'fLaC') return 'flac';
  if (ascii(0, 4) === 'OggS') return 'ogg';
  if (bytes.length >= 4 && bytes.readUInt32BE(0) === 0x1a45dfa3) return 'webm';
  if (ascii(4, 8) === 'ftyp') return 'mp4';
  if (ascii(0, 3) === 'ID3') return 'mp3';
  if (bytes.length >= 2 && bytes[0] === 0xff && (bytes[1]! & 0xf6) === 0xf0) return 'aac'; // ADTS sync, layer 0
  if (bytes.length >= 2 && bytes[0] === 0xff && (bytes[1]! & 0xe0) === 0xe0) return 'mp3'; // MPEG audio frame sync
  const extension = /\.([a-z0-9]+)$/i.exec(filename)?.[1]?.toLowerCase();
  return extension ? EXTENSIONS[extension] : undefined;
}

/** Exact duration of a PCM WAV from its header (fmt byte rate, data chunk size); undefined when unusual. */
export function wavDurationMs(data: Uint8Array): number | undefined {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let offset = 12;
  let byteRate = 0;
  while (offset + 8 <= bytes.length) {
    const id = bytes.subarray(offset, offset + 4).toString('latin1');
    const size = bytes.readUInt32LE(offset + 4);
    if (id === 'fmt ' && offset + 16 <= bytes.length) byteRate = bytes.readUInt32LE(offset + 16);
    if (id === 'data') {
      if (!byteRate) return undefined;
      // A streamed WAV may say 0 or 0xFFFFFFFF: then the bytes that are there count.
      const available = bytes.length - offset - 8;
      const length = size === 0 || size === 0xffffffff || size > available ? available : size;
      return Math.round((length * 1000) / byteRate);
    }
    offset += 8 + size + (size % 2);
  }
  return undefined;
}

/** The last `time=HH:MM:SS.ss` of ffmpeg's progress output, in ms. */
function lastProgressTimeMs(stderr: string): number | undefined {
  const matches = [...stderr.matchAll(/time=\s*(\d+):(\d\d):(\d\d(?:\.\d+)?)/g)];
  const last = matches.at(-1);
  if (!last) return undefined;
  return Math.round((Number(last[1]) * 3600 + Number(last[2]) * 60 + Number(last[3])) * 1000);
}

/** A counting semaphore: at most `limit` ffmpeg processes, the rest queue in order. */
class Slots {
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(private readonly limit: number) {}
  async acquire(): Promise<() => void> {
    if (this.running >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
    return () => {
      this.running--;
      this.waiting.shift()?.();
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
 * ConvertAudio: detects the container, measures the length and, when a target is named, re-encodes with
 * ffmpeg. The input goes through a temporary file (an mp4/m4a keeps its index at the end, which a pipe
 * cannot seek to). Bounded in size, time and concurrency; a cancelled call kills ffmpeg.
 */
export class AudioConverter {
  private readonly slots: Slots;

  constructor(private readonly limits: AudioLimits = DEFAULT_AUDIO_LIMITS) {
    this.slots = new Slots(limits.concurrency);
  }

  async convert(data: Uint8Array, targetFormat: string, filename: string, signal?: AbortSignal): Promise<ConvertedAudio> {
    if (data.length === 0) throw errors.invalidRequest('the audio is empty', 'data');
    if (data.length > this.limits.maxInputBytes) {
      throw new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, `the audio is larger than ${this.limits.maxInputBytes} bytes`, { param: 'data' });
    }
    const target = targetFormat ? TARGETS[targetFormat] : undefined;
    if (targetFormat && !target) throw errors.invalidRequest(`unknown target format ${JSON.stringify(targetFormat)} (mp3, wav, flac, opus, aac, pcm)`, 'target_format');
    const sourceFormat = sniffContainer(data, filename);
    if (!sourceFormat) throw errors.invalidRequest('the file is not audio in a container the gateway reads (mp3, wav, flac, ogg, webm, mp4/m4a, aac)', 'data');
    if (!target && sourceFormat === 'wav') {
      const exact = wavDurationMs(data);
      if (exact !== undefined) return { data: new Uint8Array(), contentType: '', durationMs: exact, sourceFormat };
    }
    const release = await this.slots.acquire();
    const directory = await mkdtemp(join(tmpdir(), 'gateway-audio-'));
    try {
      const input = join(directory, `input.${sourceFormat}`);
      await writeFile(input, data);
      const output = target ? [...target.args, 'pipe:1'] : ['-f', 'null', '-'];
      const { stdout, stderr } = await this.run(['-hide_banner', '-nostdin', '-i', input, '-vn', ...output], signal);
      const durationMs = target?.contentType === 'audio/wav' ? (wavDurationMs(stdout) ?? lastProgressTimeMs(stderr)) : lastProgressTimeMs(stderr);
      if (durationMs === undefined) throw errors.invalidRequest('the audio could not be decoded', 'data');
      return { data: target ? stdout : new Uint8Array(), contentType: target?.contentType ?? '', durationMs, sourceFormat };
    } finally {
      release();
      await rm(directory, { recursive: true, force: true });
    }
  }

  private run(args: string[], signal?: AbortSignal): Promise<{ stdout: Buffer; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(ffmpegPath(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      let outBytes = 0;
      let stderr = '';
      let failure: Error | undefined;
      const stop = (error: Error) => {
        failure ??= error;
        child.kill('SIGKILL');
      };
      const timer = setTimeout(
        () => stop(new GatewayError(GrpcStatus.DEADLINE_EXCEEDED, ErrorReason.ERROR_REASON_UNSPECIFIED, `audio conversion took longer than ${this.limits.timeoutMs} ms`)),
        this.limits.timeoutMs,
      );
      const onAbort = () => stop(new GatewayError(GrpcStatus.CANCELLED, ErrorReason.ERROR_REASON_UNSPECIFIED, 'the caller cancelled the conversion'));
      signal?.addEventListener('abort', onAbort, { once: true });
      child.stdout.on('data', (chunk: Buffer) => {
        outBytes += chunk.length;
        // A conversion never needs to be many times its input (wav of a compressed input is the worst case).
        if (outBytes > this.limits.maxInputBytes * 16) stop(new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, 'the converted audio is too large'));
        else out.push(chunk);
      });
      // Only the tail matters (the last progress line, the error); the head is the banner.
      child.stderr.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-8_192); });
      child.once('error', (error) => stop(error));
      child.once('close', (code) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (failure) return reject(failure);
        if (code !== 0) {
          const reason = stderr.trim().split('\n').filter((line) => !line.startsWith('size=')).at(-1) ?? `exit ${code}`;
          return reject(errors.invalidRequest(`the audio could not be decoded: ${reason.slice(0, 300)}`, 'data'));
        }
        resolve({ stdout: Buffer.concat(out), stderr });
      });
    });
  }
}
