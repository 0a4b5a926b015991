import { ACCOUNT_TIERS, errors, formatCredits, parseCredits } from '@gateway/platform';
import type { LimitReset } from './schema.js';

export const TIERS = ACCOUNT_TIERS;
export const DEFAULT_TIER = 'tier-1';
export const ROUTING_STRATEGIES = ['reliability', 'balanced', 'latency', 'throughput', 'cache'] as const;

export const NAME_MAX_LENGTH = 200;
export const IDEMPOTENCY_KEY_MAX_LENGTH = 200;
/** Identifiers we mint are ~30 characters; anything far longer is not ours and is not looked up. */
export const ID_MAX_LENGTH = 100;
export const LIST_LIMIT_MAX = 100;
/** A credit limit above this is a typo, not a budget (and keeps the numeric column bounded). */
export const CREDIT_LIMIT_MAX_PICO = parseCredits('1000000000000');

export function requireName(value: string, param = 'name'): string {
  const name = value.trim();
  if (name.length === 0) throw errors.invalidRequest(`${param} must not be empty`, param);
  if ([...name].length > NAME_MAX_LENGTH) throw errors.invalidRequest(`${param} must be at most ${NAME_MAX_LENGTH} characters`, param);
  if (/[\u0000-\u001f\u007f]/.test(name)) throw errors.invalidRequest(`${param} must not contain a control character`, param);
  return name;
}

export function requireId(value: string, param: string): string {
  if (value.length === 0) throw errors.invalidRequest(`${param} is required`, param);
  if (value.length > ID_MAX_LENGTH) throw errors.invalidRequest(`${param} is too long`, param);
  return value;
}

export function tierOrDefault(value: string): string {
  if (value === '') return DEFAULT_TIER;
  if (!(TIERS as readonly string[]).includes(value)) {
    throw errors.invalidRequest(`tier must be one of ${TIERS.join(', ')}`, 'tier');
  }
  return value;
}

/** '' means "none" (the service default applies); anything else must be a known strategy. */
export function routingStrategy(value: string): string {
  if (value === '' || (ROUTING_STRATEGIES as readonly string[]).includes(value)) return value;
  throw errors.invalidRequest(
    `default_routing_strategy must be one of ${ROUTING_STRATEGIES.join(', ')}`,
    'default_routing_strategy',
  );
}

/** A non-negative decimal with at most 12 decimals, normalised ("5.50" -> "5.5"). Never a float. */
export function creditLimit(value: string): string {
  let pico: bigint;
  try {
    pico = parseCredits(value);
  } catch {
    throw errors.invalidRequest('credit_limit must be a decimal number with at most 12 decimals', 'credit_limit');
  }
  if (pico < 0n) throw errors.invalidRequest('credit_limit must not be negative', 'credit_limit');
  if (pico > CREDIT_LIMIT_MAX_PICO) throw errors.invalidRequest('credit_limit is too large', 'credit_limit');
  return formatCredits(pico);
}

export const LIMIT_RESETS = ['daily', 'weekly', 'monthly'] as const;

/** '' means none (the limit bounds lifetime spend); anything else must be a known window. */
export function limitReset(value: string): LimitReset | null {
  if (value === '') return null;
  if ((LIMIT_RESETS as readonly string[]).includes(value)) return value as LimitReset;
  throw errors.invalidRequest(`limit_reset must be one of ${LIMIT_RESETS.join(', ')}`, 'limit_reset');
}

/** Latest expiry accepted: year 9999 (Postgres and ISO 8601 both carry it; anything later is a typo). */
const EXPIRES_AT_MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** An expiry must lie in the future (by `nowMs`): a key that is expired at creation is a mistake. */
export function expiresAt(valueMs: bigint, nowMs: number): Date {
  if (valueMs > BigInt(EXPIRES_AT_MAX_MS) || valueMs < 0n) throw errors.invalidRequest('expires_at is out of range', 'expires_at');
  const at = Number(valueMs);
  if (at <= nowMs) throw errors.invalidRequest('expires_at must be in the future', 'expires_at');
  return new Date(at);
}

export function listLimit(value: number): number {
  if (value === 0) return LIST_LIMIT_MAX;
  if (!Number.isInteger(value) || value < 1 || value > LIST_LIMIT_MAX) {
    throw errors.invalidRequest(`limit must be between 1 and ${LIST_LIMIT_MAX}`, 'limit');
  }
  return value;
}

/**
 * The list cursor is the last returned key's insertion sequence, base64url-wrapped so callers treat
 * it as opaque. The query stays scoped to the caller's account, so a forged cursor reveals nothing.
 */
export function encodeCursor(seq: bigint): string {
  return Buffer.from(`v1:${seq}`, 'utf8').toString('base64url');
}

const MAX_BIGINT = 9_223_372_036_854_775_807n;

export function decodeCursor(cursor: string): bigint | undefined {
  if (cursor === '') return undefined;
  const invalid = () => errors.invalidRequest('cursor is not valid', 'cursor');
  if (cursor.length > 64 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalid();
  const match = /^v1:([1-9][0-9]{0,18})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) throw invalid();
  const seq = BigInt(match[1]!);
  // The sequence is a Postgres bigint: a larger number was never made here (and Postgres would refuse it).
  if (seq > MAX_BIGINT) throw invalid();
  return seq;
}

/**
 * The account list cursor: the id of the last account returned (accounts are listed newest first,
 * ties by id; the next page starts below that account's own row), base64url-wrapped so callers treat
 * it as opaque. A cursor naming no account yields an empty page.
 */
export function encodeAccountCursor(id: string): string {
  return Buffer.from(`a1:${id}`, 'utf8').toString('base64url');
}

export function decodeAccountCursor(cursor: string): string | undefined {
  if (cursor === '') return undefined;
  const invalid = () => errors.invalidRequest('cursor is not valid', 'cursor');
  if (cursor.length > 256 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalid();
  // An account id has no control character (Postgres refuses a NUL in text).
  const match = /^a1:([^\u0000-\u001f\u007f]{1,128})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) throw invalid();
  return match[1]!;
}
