import type { GeminiLogprobsResult } from './gemini-api-types.js';

interface OpenAILogprob {
  token: string;
  logprob: number;
  bytes: number[];
}

const encoder = new TextEncoder();

function entry(token: string | null | undefined, logProbability: number | null | undefined): OpenAILogprob {
  const text = token ?? '';
  return { token: text, logprob: logProbability ?? 0, bytes: [...encoder.encode(text)] };
}

/**
 * A candidate's `logprobsResult` as chat completions' `choices[].logprobs` (JSON text, as the OpenAI-wire
 * adapters relay theirs): one `content` entry per chosen token with its UTF-8 bytes, and that step's
 * top candidates as `top_logprobs` (empty when the request asked for none). Gemini's chosen token may
 * be missing from its top list; it stays as Gemini sent it. Undefined when there is nothing to carry.
 */
export function convertGeminiLogprobs(result: GeminiLogprobsResult | null | undefined): string | undefined {
  if (result == null) return undefined;
  const chosen = result.chosenCandidates ?? [];
  const top = result.topCandidates ?? [];
  const content = chosen.map((candidate, step) => ({
    ...entry(candidate.token, candidate.logProbability),
    top_logprobs: (top[step]?.candidates ?? []).map((alternative) => entry(alternative.token, alternative.logProbability)),
  }));
  return JSON.stringify({ content, refusal: null });
}
