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

/**
 * Real audio from ffmpeg: one short tone per word (pitch from the word's hash), encoded in the asked
 * container and streamed as ffmpeg writes it. The attempt's abort kills ffmpeg.
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
  // Piecewise expression: tone k plays during [k·slot, k·slot + tone), silence in the gaps. Quoted: the
  // filter graph would otherwise read its commas as filter separators.
  const expression = pitches.map((pitch, index) => `between(t,${(index * slot).toFixed(4)},${(index * slot + tone).toFixed(4)})*sin(2*PI*${pitch}*t)`).join('+');
  const duration = (pitches.length * slot).toFixed(3);
  const child = spawn(
    ffmpegPath(),
    ['-hide_banner', '-nostdin', '-v', 'error', '-f', 'lavfi', '-i', `aevalsrc=exprs='0.4*(${expression})':s=${SAMPLE_RATE}:d=${duration}`, '-ac', '1', ...format.args, 'pipe:1'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const onAbort = () => child.kill('SIGKILL');
  signal.addEventListener('abort', onAbort);
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-2_000); });
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (error) => reject(new ProviderError('connection', `ffmpeg did not start: ${error.message}`, 0, { cause: error })));
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
