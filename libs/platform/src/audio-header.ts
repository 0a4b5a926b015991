/**
 * Cheap, pure reads of an uploaded audio file's first bytes, shared by the edge (a refusal and a hold
 * before admission, no ffmpeg) and the media service (which container ffmpeg is told to read).
 */

/** The containers the gateway reads (spec §4.4: mp3, mp4/m4a, mpeg/mpga, wav, webm, ogg, flac, aac). */
export type AudioContainer = 'wav' | 'flac' | 'ogg' | 'webm' | 'mp4' | 'mp3' | 'aac';

/** Bytes taken by leading ID3v2 tags (10-byte header + syncsafe size + optional footer), 0 without one. */
export function id3v2Length(bytes: Uint8Array): number {
  let offset = 0;
  // A file may carry more than one tag in a row; a handful is plenty.
  for (let tags = 0; tags < 4; tags++) {
    const at = offset;
    if (bytes.length < at + 10 || bytes[at] !== 0x49 || bytes[at + 1] !== 0x44 || bytes[at + 2] !== 0x33) break;
    const size = ((bytes[at + 6]! & 0x7f) << 21) | ((bytes[at + 7]! & 0x7f) << 14) | ((bytes[at + 8]! & 0x7f) << 7) | (bytes[at + 9]! & 0x7f);
    offset = at + 10 + size + ((bytes[at + 5]! & 0x10) !== 0 ? 10 : 0);
  }
  return offset;
}

function isMpegAudioFrame(bytes: Uint8Array, at: number): boolean {
  if (bytes.length < at + 4 || bytes[at] !== 0xff || (bytes[at + 1]! & 0xe0) !== 0xe0) return false;
  const version = (bytes[at + 1]! >> 3) & 3;
  const layer = (bytes[at + 1]! >> 1) & 3;
  const bitrate = bytes[at + 2]! >> 4;
  const rate = (bytes[at + 2]! >> 2) & 3;
  return version !== 1 && layer !== 0 && bitrate !== 15 && rate !== 3;
}

function isAdtsFrame(bytes: Uint8Array, at: number): boolean {
  // 12-bit sync, layer 00, a valid sampling index.
  return bytes.length >= at + 7 && bytes[at] === 0xff && (bytes[at + 1]! & 0xf6) === 0xf0 && ((bytes[at + 2]! >> 2) & 0xf) < 13;
}

/**
 * The container by its magic bytes only — a file name never decides (a text playlist named `x.ogg` is not
 * audio). An ID3v2 tag may precede mp3, aac and flac; what follows it decides. Undefined: not audio the
 * gateway reads.
 */
export function sniffAudioContainer(data: Uint8Array): AudioContainer | undefined {
  const bytes = data;
  const ascii = (start: number, end: number) => (bytes.length >= end ? String.fromCharCode(...bytes.subarray(start, end)) : '');
  if (ascii(0, 4) === 'RIFF' && ascii(8, 12) === 'WAVE') return 'wav';
  if (ascii(0, 4) === 'OggS') return 'ogg';
  if (ascii(0, 4) === '\x1a\x45\xdf\xa3') return 'webm';
  if (ascii(4, 8) === 'ftyp') return 'mp4';
  const start = id3v2Length(bytes);
  if (bytes.length >= start + 4 && String.fromCharCode(...bytes.subarray(start, start + 4)) === 'fLaC') return 'flac';
  if (isAdtsFrame(bytes, start)) return 'aac';
  if (isMpegAudioFrame(bytes, start)) return 'mp3';
  return undefined;
}

/** A PCM WAV's layout, read from its chunks. */
export interface WavLayout {
  /** 1 (integer PCM) or 3 (IEEE float), also when written as WAVE_FORMAT_EXTENSIBLE. */
  format: 1 | 3;
  channels: number;
  sampleRate: number;
  bitsPerSample: number;
  /** channels × bits / 8: the bytes of one sample frame. */
  blockAlign: number;
  /** Bytes of audio in every `data` chunk (a chunk claiming more than the file holds counts what is there). */
  dataBytes: number;
  dataChunks: number;
  /** Whole sample frames ÷ sample rate, in ms (rounded to the nearest). */
  durationMs: number;
}

/**
 * Reads and checks a WAV's header. Answers the layout, or the reason it is not a plain PCM WAV whose
 * length can be trusted from its header: another codec, a fmt chunk whose fields disagree (byte rate ≠
 * sample rate × block align, block align ≠ channels × bits / 8), values out of range, a chunk running past
 * the end, no fmt or data chunk.
 */
export function readWavLayout(data: Uint8Array): { layout: WavLayout } | { problem: string } {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.length < 12 || bytes.toString('latin1', 0, 4) !== 'RIFF' || bytes.toString('latin1', 8, 12) !== 'WAVE') return { problem: 'not a RIFF/WAVE file' };
  let fmt: Omit<WavLayout, 'dataBytes' | 'dataChunks' | 'durationMs'> | undefined;
  let dataBytes = 0;
  let dataChunks = 0;
  let offset = 12;
  while (offset + 8 <= bytes.length) {
    const id = bytes.toString('latin1', offset, offset + 4);
    const size = bytes.readUInt32LE(offset + 4);
    const body = offset + 8;
    const available = bytes.length - body;
    if (id === 'fmt ') {
      if (fmt) return { problem: 'more than one fmt chunk' };
      if (dataChunks > 0) return { problem: 'the fmt chunk follows the data' };
      if (size < 16 || size > available) return { problem: 'a short fmt chunk' };
      let tag = bytes.readUInt16LE(body);
      const channels = bytes.readUInt16LE(body + 2);
      const sampleRate = bytes.readUInt32LE(body + 4);
      const byteRate = bytes.readUInt32LE(body + 8);
      const blockAlign = bytes.readUInt16LE(body + 12);
      const bitsPerSample = bytes.readUInt16LE(body + 14);
      if (tag === 0xfffe) {
        // WAVE_FORMAT_EXTENSIBLE: the sub-format GUID's first two bytes are the real tag.
        if (size < 40) return { problem: 'a short extensible fmt chunk' };
        tag = bytes.readUInt16LE(body + 24);
      }
      if (tag !== 1 && tag !== 3) return { problem: `codec ${tag} is not PCM` };
      const bitsAllowed = tag === 1 ? [8, 16, 24, 32] : [32, 64];
      if (!bitsAllowed.includes(bitsPerSample)) return { problem: `${bitsPerSample} bits per sample` };
      if (channels < 1 || channels > 8) return { problem: `${channels} channels` };
      if (sampleRate < 1_000 || sampleRate > 384_000) return { problem: `a sample rate of ${sampleRate} Hz` };
      if (blockAlign !== (channels * bitsPerSample) / 8) return { problem: 'the block align is not channels × bits / 8' };
      if (byteRate !== sampleRate * blockAlign) return { problem: 'the byte rate is not sample rate × block align' };
      fmt = { format: tag, channels, sampleRate, bitsPerSample, blockAlign };
    } else if (id === 'data') {
      if (!fmt) return { problem: 'the data chunk comes before the fmt chunk' };
      // A streamed WAV may say 0 or 0xFFFFFFFF; a cut one claims more than is there: the bytes present count
      // (decoders read them all the same).
      const length = size === 0 || size > available ? available : size;
      dataBytes += length;
      dataChunks++;
      offset = body + length + (length % 2);
      continue;
    } else if (size > available) {
      return { problem: `the ${JSON.stringify(id)} chunk runs past the end` };
    }
    offset = body + size + (size % 2);
  }
  if (!fmt) return { problem: 'no fmt chunk' };
  if (dataChunks === 0) return { problem: 'no data chunk' };
  const frames = Math.floor(dataBytes / fmt.blockAlign);
  return { layout: { ...fmt, dataBytes, dataChunks, durationMs: Math.round((frames * 1000) / fmt.sampleRate) } };
}
