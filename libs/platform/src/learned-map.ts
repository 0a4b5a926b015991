import type { KeyValueBucketOptions } from './bus/key-value.js';

/**
 * The learned capability map's shared value (docs/providers.md "Learned capability map"): every routing
 * replica keeps the map in memory and shares it through one key of a key-value bucket on the bus, and an
 * operator reads or clears it there (`nats kv get ROUTING_LEARNED_PARAMS map`). So the bucket, its key,
 * its limits and the value's layout are a wire format between processes, kept here; what the map means
 * (the evidence rule, the bounds, the merge) is routing's (apps/routing routing/learned-capabilities.ts).
 *
 * The value (version 2) is JSON: `{"version":2,"entries":[{provider, model, names, expiresAt, evidence}]}`
 * with evidence as `[name, account, expiresAt]` triples (the value stays small). A version-1 value (names
 * learned from one refusal, before issue 35) is not read.
 */

/** The bucket and its one key. */
export const LEARNED_BUCKET = 'ROUTING_LEARNED_PARAMS';
export const LEARNED_KEY = 'map';
/** How long a learned parameter (and a refusal's evidence) is remembered by default: 24 h. */
export const LEARNED_TTL_MS = 24 * 60 * 60_000;

/** The bucket's limits: every process that opens it opens it with these (opening brings the bucket's limits to them). */
export function learnedBucketOptions(ttlMs: number = LEARNED_TTL_MS): KeyValueBucketOptions {
  return { name: LEARNED_BUCKET, ttlMs, maxBytes: 16 * 1024 * 1024, maxValueBytes: 768 * 1024 };
}

/** One account was refused `name` (until `expiresAt`). */
export interface LearnedEvidence {
  name: string;
  account: string;
  expiresAt: number;
}

/** One provider × upstream model pair of the shared value. */
export interface LearnedMapEntry {
  provider: string;
  model: string;
  /** Confirmed by the quorum: every account goes without them (until `expiresAt`). */
  names: readonly string[];
  expiresAt: number;
  /** Not (yet) confirmed: each account goes without its own. */
  evidence: readonly LearnedEvidence[];
}

export function encodeLearnedMap(entries: readonly LearnedMapEntry[]): Uint8Array {
  const out = entries.map((entry) => ({
    provider: entry.provider,
    model: entry.model,
    names: entry.names,
    expiresAt: entry.expiresAt,
    evidence: entry.evidence.map((record) => [record.name, record.account, record.expiresAt]),
  }));
  return Buffer.from(JSON.stringify({ version: 2, entries: out }), 'utf8');
}

const isString = (value: unknown): value is string => typeof value === 'string';

function decodeEvidence(value: unknown, accept: (name: string) => boolean): LearnedEvidence[] {
  if (!Array.isArray(value)) return [];
  const out: LearnedEvidence[] = [];
  for (const item of value) {
    // Triples (version 2); objects are read too.
    const [name, account, expiresAt] = Array.isArray(item) ? item : [item?.name, item?.account, item?.expiresAt];
    if (isString(name) && isString(account) && typeof expiresAt === 'number' && accept(name)) out.push({ name, account, expiresAt });
  }
  return out;
}

/**
 * The entries of a stored value; anything malformed (or of another version) reads as nothing. Evidence
 * records whose name `accept` refuses are left out.
 */
export function decodeLearnedMap(value: Uint8Array | undefined, accept: (name: string) => boolean = () => true): LearnedMapEntry[] {
  if (value === undefined || value.byteLength === 0) return [];
  try {
    const parsed = JSON.parse(Buffer.from(value).toString('utf8')) as { version?: unknown; entries?: unknown };
    if (parsed.version !== 2 || !Array.isArray(parsed.entries)) return [];
    const out: LearnedMapEntry[] = [];
    for (const entry of parsed.entries as Record<string, unknown>[]) {
      if (!isString(entry?.provider) || !isString(entry?.model) || !Array.isArray(entry?.names) || !entry.names.every(isString) || typeof entry?.expiresAt !== 'number') continue;
      out.push({ provider: entry.provider, model: entry.model, names: entry.names, expiresAt: entry.expiresAt, evidence: decodeEvidence(entry.evidence, accept) });
    }
    return out;
  } catch {
    return [];
  }
}
