import { randomBytes } from 'node:crypto';
import { formatCredits, parseCredits, type AccountActivityEntry, type AccountKeyRecord } from '@gateway/platform';
import type { ActivityRow, ApiKey } from '@gateway/proto';

/**
 * JSON of the account routes. Money is never a JS number (DESIGN §1), yet the spec gives
 * `credit_limit` the JSON type number (§2.10): such amounts are written as number literals carrying
 * every digit of the decimal, without passing through a double.
 */
class JsonDecimal {
  constructor(readonly text: string) {}
  toJSON(): string {
    return `${DECIMAL_MARK}${this.text}${DECIMAL_MARK}`;
  }
}

// A per-process secret around the placeholder, so no string a client stored (a key name) can
// imitate it and be turned into a bare literal.
const DECIMAL_MARK = `\u0000${randomBytes(8).toString('hex')}\u0000`;
/** The mark as JSON.stringify writes it (`\\u0000...`), escaped for a RegExp. */
const ENCODED_MARK = JSON.stringify(DECIMAL_MARK).slice(1, -1).replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
const DECIMAL_PATTERN = new RegExp(`"${ENCODED_MARK}(-?\\d+(?:\\.\\d+)?)${ENCODED_MARK}"`, 'g');

/** A decimal credit amount as an exact JSON number (normalised: "5.50" is written 5.5). */
export function jsonNumber(decimal: string): JsonDecimal {
  return new JsonDecimal(formatCredits(parseCredits(decimal)));
}

export function stringifyWithDecimals(value: unknown): string {
  return JSON.stringify(value).replace(DECIMAL_PATTERN, '$1');
}

export type KeyRecord = AccountKeyRecord<JsonDecimal>;

/** The spend of a key as the ledger reports it (decimal credits): in all and in the current windows. */
export interface KeySpend {
  credits: string;
  creditsDaily?: string | undefined;
  creditsWeekly?: string | undefined;
  creditsMonthly?: string | undefined;
}

const seconds = (milliseconds: bigint) => Number(milliseconds / 1000n);

const LIMIT_RESETS = new Set(['daily', 'weekly', 'monthly']);

/** The key record of the account API: what OpenRouter's key API shows, never the secret or the hash. */
export function keyRecord(key: ApiKey, spend: string | KeySpend): KeyRecord {
  const usage: KeySpend = typeof spend === 'string' ? { credits: spend } : spend;
  const usagePico = parseCredits(usage.credits);
  const window = {
    daily: parseCredits(usage.creditsDaily || '0'),
    weekly: parseCredits(usage.creditsWeekly || '0'),
    monthly: parseCredits(usage.creditsMonthly || '0'),
  };
  const limitReset = key.limitReset && LIMIT_RESETS.has(key.limitReset) ? (key.limitReset as 'daily' | 'weekly' | 'monthly') : null;
  // A windowed limit bounds the current window's spend; a lifetime one all of it.
  const countedPico = limitReset === null ? usagePico : window[limitReset];
  const limitPico = key.creditLimit === undefined ? undefined : parseCredits(key.creditLimit);
  return {
    id: key.id,
    name: key.name,
    label: key.label,
    disabled: key.disabled,
    credit_limit: limitPico === undefined ? null : jsonNumber(formatCredits(limitPico)),
    usage: jsonNumber(formatCredits(usagePico)),
    limit_remaining: limitPico === undefined ? null : jsonNumber(formatCredits(limitPico > countedPico ? limitPico - countedPico : 0n)),
    limit_reset: limitReset,
    usage_daily: jsonNumber(formatCredits(window.daily)),
    usage_weekly: jsonNumber(formatCredits(window.weekly)),
    usage_monthly: jsonNumber(formatCredits(window.monthly)),
    default_routing_strategy: key.defaultRoutingStrategy === '' ? null : key.defaultRoutingStrategy,
    created_at: seconds(key.createdAtMs),
    updated_at: seconds(key.updatedAtMs),
    expires_at: key.expiresAtMs === undefined ? null : new Date(Number(key.expiresAtMs)).toISOString(),
  };
}

export type ActivityEntry = AccountActivityEntry;

/**
 * The ledger answers per day × model × key; the account view sums the keys. Token counts are
 * integers far below 2^53 (a day's rows are bounded by the ledger); credits are summed in pico.
 * Order: newest day first, then model id.
 */
export function activityEntries(rows: readonly ActivityRow[]): ActivityEntry[] {
  const byDayAndModel = new Map<string, { entry: ActivityEntry; creditsPico: bigint }>();
  for (const row of rows) {
    const id = `${row.date}\u0000${row.modelId}`;
    let slot = byDayAndModel.get(id);
    if (!slot) {
      slot = {
        entry: {
          date: row.date,
          model: row.modelId,
          requests: 0,
          prompt_tokens: 0,
          completion_tokens: 0,
          reasoning_tokens: 0,
          cached_prompt_tokens: 0,
          total_tokens: 0,
          credits: '0',
        },
        creditsPico: 0n,
      };
      byDayAndModel.set(id, slot);
    }
    const usage = row.usage;
    slot.entry.requests += row.requests;
    slot.entry.prompt_tokens += usage?.inputTokens ?? 0;
    slot.entry.completion_tokens += usage?.outputTokens ?? 0;
    slot.entry.reasoning_tokens += usage?.reasoningTokens ?? 0;
    slot.entry.cached_prompt_tokens += usage?.cachedInputTokens ?? 0;
    slot.entry.total_tokens = slot.entry.prompt_tokens + slot.entry.completion_tokens;
    slot.creditsPico += parseCredits(row.credits || '0');
  }
  return [...byDayAndModel.values()]
    .map(({ entry, creditsPico }) => ({ ...entry, credits: formatCredits(creditsPico) }))
    .sort((left, right) => (left.date === right.date ? (left.model < right.model ? -1 : left.model > right.model ? 1 : 0) : left.date < right.date ? 1 : -1));
}
