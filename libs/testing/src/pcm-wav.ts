/** A canonical 16-bit mono PCM WAV of `seconds` at `rate` (a quiet 440 Hz tone, so it is not all zeros), built byte by byte. */
export function pcmWav(seconds: number, rate = 16_000): Buffer {
  const samples = Math.round(seconds * rate);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'latin1');
  header.writeUInt32LE(36 + samples * 2, 4);
  header.write('WAVEfmt ', 8, 'latin1');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28); // byte rate
  header.writeUInt16LE(2, 32); // block align
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'latin1');
  header.writeUInt32LE(samples * 2, 40);
  const pcm = Buffer.alloc(samples * 2);
  for (let index = 0; index < samples; index++) pcm.writeInt16LE(Math.round(3000 * Math.sin((2 * Math.PI * 440 * index) / rate)), index * 2);
  return Buffer.concat([header, pcm]);
}
