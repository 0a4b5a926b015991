/**
 * The JSON of the account API as the edge writes it and its clients (the console, the tests) read it:
 * declared once, here. Types only: the console imports this file into a browser bundle
 * (`@gateway/platform/account-api`), where nothing of the rest of the package may go.
 */

/**
 * A key record of /v1/account/keys: what OpenRouter's key API shows, never the secret or the hash.
 * `Amount` is how a credit amount is carried: a JSON number once parsed; the edge writes an exact
 * decimal literal in its place (DESIGN §1: money never passes through a double on the way out).
 */
export interface AccountKeyRecord<Amount = number> {
  id: string;
  name: string;
  label: string;
  disabled: boolean;
  credit_limit: Amount | null;
  /** Credits spent through the key (settled charges). */
  usage: Amount;
  /** What the key may still spend (in the current window when limit_reset is set); null without a limit. */
  limit_remaining: Amount | null;
  /** The window credit_limit applies to, resetting at UTC midnight (weeks from Monday); null: the key's lifetime. */
  limit_reset: 'daily' | 'weekly' | 'monthly' | null;
  /** Credits charged through the key in the current UTC day, week (from Monday) and month. */
  usage_daily: Amount;
  usage_weekly: Amount;
  usage_monthly: Amount;
  default_routing_strategy: string | null;
  /** Unix seconds (spec §4). */
  created_at: number;
  updated_at: number;
  /** ISO 8601 UTC instant from which the key is refused (401 key_expired), as OpenRouter writes it; null: never. */
  expires_at: string | null;
}

/** One entry of GET /v1/account/activity: a UTC day × model, summed over the keys asked for. */
export interface AccountActivityEntry {
  date: string;
  model: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  cached_prompt_tokens: number;
  total_tokens: number;
  /** Credits charged, decimal string (like the balance). */
  credits: string;
}
