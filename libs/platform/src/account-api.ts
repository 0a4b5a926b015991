/**
 * The JSON of the account API as the edge writes it and its clients (the console, the tests) read it:
 * declared once, here. Types and plain constants only (no imports): the console imports this file into a
 * browser bundle (`@gateway/platform/account-api`), where nothing of the rest of the package may go.
 */

/**
 * The webhook event types other services produce and relay to the ledger over the bus (auth: keys; jobs:
 * batches); the ledger's own types are written where they happen. docs/governance.md "Webhooks".
 */
export const RELAYED_WEBHOOK_EVENT_TYPES = ['api_key.created', 'api_key.disabled', 'api_key.deleted', 'api_key.expired', 'batch.completed'] as const;

/** Every event type a webhook endpoint may subscribe to: the ledger's own, then the relayed ones. */
export const WEBHOOK_EVENT_TYPES = ['budget.threshold_crossed', 'credits.topped_up', 'balance.low', ...RELAYED_WEBHOOK_EVENT_TYPES] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

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
