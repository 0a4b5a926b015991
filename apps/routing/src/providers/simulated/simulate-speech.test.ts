import { describe, expect, it } from 'vitest';
import { ProviderError } from '../provider-adapter.js';
import { SPEECH_QUEUE, SPEECH_SLOTS, synthesizeSpeech } from './simulate-speech.js';

const request = (input: string, responseFormat = 'wav') => ({ upstreamModel: 's', input, voice: 'alloy', speed: undefined, instructions: undefined, responseFormat });

async function drain(audio: AsyncIterable<Uint8Array>): Promise<number> {
  let bytes = 0;
  for await (const chunk of audio) bytes += chunk.length;
  return bytes;
}

describe('simulated speech: bounded work', () => {
  it('makes the longest input (270 words, about a minute) in a bounded time', async () => {
    // Issue 29: the old filter graph evaluated every word's term for every sample, 60 s of CPU for this input.
    // Generous bound (a loaded 2-core machine): the samples are made in one linear pass, ffmpeg only encodes.
    const started = Date.now();
    const speech = await synthesizeSpeech(request(Array.from({ length: 400 }, (_, index) => `word${index}`).join(' ')), new AbortController().signal);
    const bytes = await drain(speech.audio);
    // 270 tones × 0.22 s at 24 kHz, 16-bit mono (the words past 270 are not spoken), plus the wav header.
    const header = bytes - Math.ceil(270 * 0.22 * 24_000) * 2;
    expect(header >= 44 && header < 200).toBe(true);
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 30_000);

  it(`runs ${SPEECH_SLOTS} encoders, queues ${SPEECH_QUEUE}, refuses the rest as overloaded (503), and an abort leaves the queue`, async () => {
    const controllers = Array.from({ length: SPEECH_SLOTS + SPEECH_QUEUE + 2 }, () => new AbortController());
    // Nobody reads the audio: the encoders stay busy until aborted.
    const attempts = controllers.map((controller) => synthesizeSpeech(request('a b c d e f g h i j k l m n o p'.repeat(10)), controller.signal).then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    ));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const refused = await Promise.all(attempts.slice(SPEECH_SLOTS + SPEECH_QUEUE));
    for (const outcome of refused) {
      expect((outcome as { error: ProviderError }).error).toBeInstanceOf(ProviderError);
      expect((outcome as { error: ProviderError }).error.kind).toBe('overloaded');
      expect((outcome as { error: ProviderError }).error.httpStatus).toBe(503);
    }
    // A queued request whose caller left gives up its place at once.
    controllers[SPEECH_SLOTS]!.abort();
    expect((await attempts[SPEECH_SLOTS]!) as { error: ProviderError }).toMatchObject({ error: { kind: 'connection' } });
    for (const controller of controllers) controller.abort();
    const settled = await Promise.all(attempts);
    for (const outcome of settled) {
      if ('result' in outcome) await drain(outcome.result.audio).catch(() => undefined);
    }
    // Every slot came back: a new request is served.
    const after = await synthesizeSpeech(request('again'), new AbortController().signal);
    expect(await drain(after.audio)).toBeGreaterThan(44);
  }, 30_000);
});
