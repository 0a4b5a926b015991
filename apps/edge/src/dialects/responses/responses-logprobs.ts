/**
 * Logprobs in the responses dialect. Routing relays every provider's logprobs as chat completions'
 * `choices[].logprobs` object (JSON text: `{content: [{token, logprob, bytes, top_logprobs}]}`); the
 * responses dialect carries the `content` list as the output_text part's `logprobs` (token, bytes,
 * logprob, top_logprobs of token, bytes, logprob) and, in a stream, each `response.output_text.delta`
 * event's `logprobs` (token, logprob, top_logprobs of token and logprob, as openai-node types them).
 */

export interface TextLogprob {
  token: string;
  bytes: number[];
  logprob: number;
  top_logprobs: { token: string; bytes: number[]; logprob: number }[];
}

const encoder = new TextEncoder();

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function tokenEntry(raw: Record<string, unknown>): { token: string; bytes: number[]; logprob: number } {
  const token = typeof raw.token === 'string' ? raw.token : '';
  const bytes = Array.isArray(raw.bytes) && raw.bytes.every((byte) => typeof byte === 'number') ? (raw.bytes as number[]) : [...encoder.encode(token)];
  return { token, bytes, logprob: typeof raw.logprob === 'number' ? raw.logprob : 0 };
}

/** The output_text logprobs of a relayed chat logprobs object (JSON text); [] for anything unreadable. */
export function outputTextLogprobs(chatLogprobs: string): TextLogprob[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(chatLogprobs);
  } catch {
    return [];
  }
  const content = isObject(parsed) ? parsed.content : undefined;
  if (!Array.isArray(content)) return [];
  return content.filter(isObject).map((entry) => ({
    ...tokenEntry(entry),
    top_logprobs: Array.isArray(entry.top_logprobs) ? entry.top_logprobs.filter(isObject).map(tokenEntry) : [],
  }));
}

/** A `response.output_text.delta` event's logprobs: the same tokens without their bytes. */
export function deltaLogprobs(logprobs: readonly TextLogprob[]): unknown[] {
  return logprobs.map((entry) => ({
    token: entry.token,
    logprob: entry.logprob,
    top_logprobs: entry.top_logprobs.map((top) => ({ token: top.token, logprob: top.logprob })),
  }));
}
