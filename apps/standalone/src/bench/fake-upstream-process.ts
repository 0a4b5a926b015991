import { BENCH_AWS_ACCESS_KEY_ID, BENCH_GEMINI_API_KEY } from './bench-wires.js';
import { createFastUpstream } from './fast-upstream.js';
import { serveUntilSignalled } from './serve-process.js';

/**
 * The bench's upstream, its own process: the fast server of fast-upstream.ts (OpenAI, Gemini and Bedrock
 * wires, fixed answers with usage). Prints `{"ready":true,"port":N}` on stdout when listening on 127.0.0.1.
 */
serveUntilSignalled(
  createFastUpstream({
    firstChunkGapMs: Number(process.env.BENCH_FIRST_CHUNK_GAP_MS ?? 10),
    geminiApiKey: BENCH_GEMINI_API_KEY,
    awsAccessKeyId: BENCH_AWS_ACCESS_KEY_ID,
  }),
);
