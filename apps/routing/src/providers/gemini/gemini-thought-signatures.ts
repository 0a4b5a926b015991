import { randomBytes } from 'node:crypto';

/**
 * Where a Gemini `thoughtSignature` came from, kept inside the canonical reasoning signature.
 *
 * Gemini signs parts, not thinking blocks: a signature can ride on a thought part, on the answer's
 * text part, or on a functionCall part, and the API wants each back on the same kind of part (Gemini 3
 * refuses a function call in the history whose signature is missing). A function call's signature
 * rides on the canonical ToolCall itself (`signature`, `signature_provider_id` in router.proto: what a
 * chat-completions client echoes, as `extra_content.google.thought_signature`); and every signature,
 * the calls' included, also becomes a ReasoningPart of the provider that issued it (what messages and
 * responses clients echo), whose signature value is the provider's own one behind a short prefix naming the part:
 *
 *     th:<sig>;   a thought part (with the reasoning's text)
 *     tx:<sig>;   the answer's text
 *     fc<k>:<sig>; the answer's k-th function call (0-based)
 *
 * The edge tags the whole value with the issuer (apps/edge/src/canonical/reasoning-tags.ts), so it goes
 * back to this provider only, and the router strips it for any other. Google's signatures are base64:
 * no `:` and no `;`, so the records are never ambiguous, and a value that is several records joined
 * (the messages dialect appends every signature that arrives while one thinking block is open) still
 * reads back record by record. A value without a known prefix counts as one thought's signature.
 */
export type SignedPlace = { kind: 'thought' } | { kind: 'text' } | { kind: 'call'; index: number };

export function placeSignature(place: SignedPlace, signature: string): string {
  switch (place.kind) {
    case 'thought':
      return `th:${signature};`;
    case 'text':
      return `tx:${signature};`;
    case 'call':
      return `fc${place.index}:${signature};`;
  }
}

const RECORD = /^(th|tx|fc(\d{1,4})):([^:;]+)$/;

/** The signatures one canonical value holds, each with its place. */
export function readSignatures(value: string): { place: SignedPlace; signature: string }[] {
  if (!value.includes(':')) return value ? [{ place: { kind: 'thought' }, signature: value }] : [];
  const read: { place: SignedPlace; signature: string }[] = [];
  for (const record of value.split(';')) {
    const match = RECORD.exec(record);
    if (!match) continue;
    const place: SignedPlace = match[1] === 'th' ? { kind: 'thought' } : match[1] === 'tx' ? { kind: 'text' } : { kind: 'call', index: Number(match[2]) };
    read.push({ place, signature: match[3]! });
  }
  return read;
}

/**
 * The signature Google documents for function calls it did not issue (a history from another model, or
 * one whose signature a client dropped): it tells Gemini 3 to skip the check instead of refusing the
 * request with 400. Sent only on a model turn whose calls carry no signature of their own.
 */
export const SKIP_SIGNATURE_VALIDATOR = 'skip_thought_signature_validator';

/**
 * Ids for the function calls of one answer. Gemini's calls carry no id (the Gemini API leaves
 * FunctionCall.id empty); one is made per answer (a per-process random part and a counter, so two answers never share one) and the k-th
 * call gets `<prefix>_<k>` in the streamed and the whole answer alike. An id the provider did send is kept.
 */
export class CallIds {
  private static readonly processPrefix = `call_${randomBytes(6).toString('base64url')}`;
  private static answers = 0;
  private readonly prefix = `${CallIds.processPrefix}${(++CallIds.answers).toString(36)}`;

  idFor(index: number, given: string | null | undefined): string {
    return given ? given : `${this.prefix}_${index}`;
  }
}
