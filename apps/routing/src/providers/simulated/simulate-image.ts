import { createHash } from 'node:crypto';
import { PNG } from 'pngjs';
import { ProviderError, type AdapterImage } from '../provider-adapter.js';

/** Most pixels one simulated image may have (2048 × 2048). */
const MAX_PIXELS = 2_048 * 2_048;
/** The size drawn when none is asked for, or `auto` (the provider chooses). */
const DEFAULT_SIZE = '1024x1024';

function dimensions(size: string | undefined): [number, number] {
  return (size === undefined || size === 'auto' ? DEFAULT_SIZE : size).split('x').map(Number) as [number, number];
}

/**
 * A real PNG drawn from the prompt: horizontal bands whose colours come from a hash of the prompt, the
 * image's index and (for edits) the input images, so the same request draws the same picture and
 * another prompt another one.
 */
export function drawImage(prompt: string, index: number, size: string | undefined, seed: Uint8Array = new Uint8Array()): AdapterImage {
  const [width, height] = dimensions(size);
  if (!width || !height || width * height > MAX_PIXELS) {
    throw new ProviderError('rejected', `size ${size} is larger than the simulated provider draws (at most ${MAX_PIXELS} pixels)`, 400);
  }
  const digest = createHash('sha256').update(prompt).update('\0').update(String(index)).update('\0').update(seed).digest();
  const bands = 8;
  const png = new PNG({ width, height, colorType: 2, inputHasAlpha: true });
  for (let y = 0; y < height; y++) {
    const band = Math.min(bands - 1, Math.floor((y * bands) / height));
    const red = digest[band * 3 % digest.length]!;
    const green = digest[(band * 3 + 1) % digest.length]!;
    const blue = digest[(band * 3 + 2) % digest.length]!;
    for (let x = 0; x < width; x++) {
      const offset = (y * width + x) * 4;
      // A diagonal stripe keeps neighbouring bands apart and makes each image visibly its own.
      const stripe = (x + y + digest[31]!) % 64 < 4 ? 255 : 0;
      png.data[offset] = red ^ stripe;
      png.data[offset + 1] = green;
      png.data[offset + 2] = blue;
      png.data[offset + 3] = 255;
    }
  }
  return { data: PNG.sync.write(png, { colorType: 2, deflateLevel: 1 }), mediaType: 'image/png', revisedPrompt: undefined };
}

/** Image tokens of one generated image: OpenAI's tile arithmetic (85 + 170 per 512-pixel tile, at least 272). */
export function imageTokens(size: string | undefined): number {
  const [width, height] = dimensions(size);
  return Math.max(272, 85 + 170 * Math.ceil(width / 512) * Math.ceil(height / 512));
}
