import { createRequire } from 'node:module';

let cached: string | undefined;

/**
 * The ffmpeg binary (audio conversion in media, generated audio in the simulated provider and the test
 * fakes): FFMPEG_PATH when set, else the static build shipped inside the `@ffmpeg-installer/ffmpeg` npm
 * package (a 2018 build without ffprobe: formats are found by sniffing bytes or from `ffmpeg -i` output).
 *
 * @gateway/platform does not depend on that package (about 75 MB): the apps that run ffmpeg (media,
 * routing) and libs/testing declare it, so the images of the others hold no ffmpeg. It is resolved at
 * the first call, from the hoisted node_modules the workspaces share (the repository's, or /app's in an
 * image); nothing loads it before.
 */
export function ffmpegPath(): string {
  if (cached !== undefined) return cached;
  const fromEnv = process.env.FFMPEG_PATH;
  if (fromEnv) return (cached = fromEnv);
  const require = createRequire(import.meta.url);
  let installer: { path: string };
  try {
    installer = require('@ffmpeg-installer/ffmpeg') as { path: string };
  } catch (error) {
    throw new Error(
      'no ffmpeg: set FFMPEG_PATH, or install @ffmpeg-installer/ffmpeg (a dependency of the apps that run ffmpeg: media, routing)',
      { cause: error },
    );
  }
  return (cached = installer.path);
}
