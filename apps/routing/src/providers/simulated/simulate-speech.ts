import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { ffmpegPath } from '@gateway/platform';
import { ProviderError, type AdapterSpeakRequest, type AdapterSpeechResult, type AttemptSignal } from '../provider-adapter.js';

/** Container arguments and content type of each speech format (pcm: raw s16le 24 kHz mono, like OpenAI). */
const FORMATS: Readonly<Record<string, { args: readonly string[]; contentType: string }>> = {
  mp3: { args: ['-c:a', 'libmp3lame', '-b:a', '64k', '-f', 'mp3'], contentType: 'audio/mpeg' },
  opus: { args: ['-c:a', 'libopus', '-b:a', '32k', '-f', 'ogg'], contentType: 'audio/ogg' },
  aac: { args: ['-c:a', 'aac', '-b:a', '64k', '-f', 'adts'], contentType: 'audio/aac' },
  flac: { args: ['-c:a', 'flac', '-f', 'flac'], contentType: 'audio/flac' },
  wav: { args: ['-c:a', 'pcm_s16le', '-f', 'wav'], contentType: 'audio/wav' },
  pcm: { args: ['-c:a', 'pcm_s16le', '-f', 's16le'], contentType: 'audio/pcm' },
};
const SAMPLE_RATE = 24_000;
const TONE_SECONDS = 0.18;
const GAP_SECONDS = 0.04;
/** Keeps any input's audio short (about a minute at normal speed). */
const MAX_TONES = 270;
/** ffmpeg encoders running at once in this process, and requests allowed to wait for one. */
export const SPEECH_SLOTS = 2;
export const SPEECH_QUEUE = 8;

let running = 0;
const waiting: (() => void)[] = [];

/** A slot for one encoder: at once, after a bounded wait, or a 503 (overloaded) when the queue is full. */
async function acquireSlot(signal: AttemptSignal): Promise<() => void> {
  if (running >= SPEECH_SLOTS) {
    if (waiting.length >= SPEECH_QUEUE) throw new ProviderError('overloaded', 'the simulated speech encoder is busy', 503);
    await new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const index = waiting.indexOf(grant);
        if (index >= 0) waiting.splice(index, 1);
        reject(new ProviderError('connection', 'request aborted'));
      };
      waiting.push(grant);
      signal.addEventListener('abort', onAbort);
    });
  } else {
    running++;
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    // The slot passes straight to the next waiter.
    const next = waiting.shift();
    if (next) next();
    else running--;
  };
}

/** One tone per word (pitch from the word's hash), silence between: 16-bit mono PCM made here, linear in its length. */
function tonesPcm(pitches: readonly number[], tone: number, slot: number): Buffer {
  const total = Math.ceil(pitches.length * slot * SAMPLE_RATE);
  const pcm = Buffer.alloc(total * 2);
  const toneSamples = Math.floor(tone * SAMPLE_RATE);
  pitches.forEach((pitch, index) => {
    const start = Math.floor(index * slot * SAMPLE_RATE);
    for (let n = 0; n < toneSamples && start + n < total; n++) {
      pcm.writeInt16LE(Math.round(0.4 * 32767 * Math.sin((2 * Math.PI * pitch * n) / SAMPLE_RATE)), (start + n) * 2);
    }
  });
  return pcm;
}

/**
 * Real audio from ffmpeg: one short tone per word, encoded in the asked container and streamed as ffmpeg
 * writes it. The samples are made here (ffmpeg only encodes); at most SPEECH_SLOTS encoders run at once,
 * SPEECH_QUEUE more wait, the rest are refused as overloaded (503). The attempt's abort kills ffmpeg.
 */
export async function synthesizeSpeech(request: AdapterSpeakRequest, signal: AttemptSignal): Promise<AdapterSpeechResult> {
  signal.throwIfAborted();
  const format = FORMATS[request.responseFormat ?? 'mp3'];
  if (!format) throw new ProviderError('rejected', `unsupported response_format ${request.responseFormat}`, 400);
  const words = request.input.split(/\s+/).filter(Boolean).slice(0, MAX_TONES);
  const speed = request.speed && request.speed > 0 ? Math.min(Math.max(request.speed, 0.25), 4) : 1;
  const tone = TONE_SECONDS / speed;
  const slot = (TONE_SECONDS + GAP_SECONDS) / speed;
  const pitches = (words.length > 0 ? words : ['.']).map((word) => 220 + (createHash('sha256').update(request.voice).update(word).digest().readUInt16BE(0) % 660));
  const release = await acquireSlot(signal);
  if (signal.aborted) {
    release();
    signal.throwIfAborted();
  }
  const pcm = tonesPcm(pitches, tone, slot);
  const child = spawn(
    ffmpegPath(),
    ['-hide_banner', '-v', 'error', '-f', 's16le', '-ar', String(SAMPLE_RATE), '-ac', '1', '-i', 'pipe:0', ...format.args, 'pipe:1'],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  child.once('close', release);
  child.stdin.on('error', () => undefined);
  child.stdin.end(pcm);
  const onAbort = () => child.kill('SIGKILL');
  signal.addEventListener('abort', onAbort);
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-2_000); });
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (error) => {
      release();
      reject(new ProviderError('connection', `ffmpeg did not start: ${error.message}`, 0, { cause: error }));
    });
  });
  async function* audio(): AsyncGenerator<Uint8Array> {
    try {
      for await (const chunk of child.stdout as AsyncIterable<Buffer>) yield chunk;
      const code = await exited;
      signal.throwIfAborted();
      if (code !== 0) throw new ProviderError('connection', `ffmpeg failed (${code}): ${stderr.trim()}`);
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }
  return { contentType: format.contentType, audio: audio(), usage: () => undefined };
}
