import { createRequire } from 'node:module';

let cached: string | undefined;

/**
 * The ffmpeg binary every service uses (audio conversion in media, generated audio in the simulated
 * provider and the test fakes): FFMPEG_PATH when set, else the static build shipped inside the
 * `@ffmpeg-installer/ffmpeg` npm package (a 2018 build without ffprobe: formats are found by sniffing
 * bytes or from `ffmpeg -i` output).
 */
export function ffmpegPath(): string {
  if (cached !== undefined) return cached;
  const fromEnv = process.env.FFMPEG_PATH;
  if (fromEnv) return (cached = fromEnv);
  const require = createRequire(import.meta.url);
  return (cached = (require('@ffmpeg-installer/ffmpeg') as { path: string }).path);
}
