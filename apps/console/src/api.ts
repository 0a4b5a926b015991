import type { AccountActivityEntry, AccountKeyRecord } from '@gateway/platform/account-api';
import { adminToken, apiKey, identitySession, provisioningKey, type Credential } from './session.js';

// The console talks only to the public HTTP API on its own origin: the account routes with the
// provisioning key, the admin routes with the admin token, the catalog routes without a credential.

class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** A key record as the account API sends it; `key`, the plaintext, only in the answer that created it. */
export type KeyRecord = AccountKeyRecord & { key?: string };

export type ActivityRow = AccountActivityEntry;

export interface Model {
  id: string;
  owned_by: string;
  display_name?: string;
  context_window?: number;
  supported_endpoints?: string[];
  pricing?: Record<string, number | string>;
  architecture?: { input_modalities?: string[]; output_modalities?: string[] };
}

export interface Startup {
  id: string;
  display_name: string;
  icon_url: string;
  website_url?: string;
}

export interface Generation {
  id: string;
  model: string;
  provider_name: string;
  tokens_prompt: number;
  tokens_completion: number;
  total_cost: string;
  latency: number;
  finish_reason: string | null;
  cancelled?: boolean;
  created_at: number;
}

/** A page of a keyset-paged list: `next_cursor` asks for the page after this one, null on the last. */
export interface Page<T> {
  data: T[];
  next_cursor: string | null;
}

export interface ProviderHealth {
  provider: string;
  provider_name: string;
  model: string;
  samples: number;
  /** Share of failed requests, 0..1. */
  error_rate: number;
  ttft_ms: number;
  output_tokens_per_second: number;
  circuit: 'open' | 'closed' | string;
}

export interface ModelLatency {
  model: string;
  provider: string;
  requests: number;
  latency_p50_ms: number;
  latency_p95_ms: number;
  generation_time_p50_ms: number;
}

export interface AdminAccount {
  id: string;
  name: string;
  tier: string;
  created_at: number;
  balance: string;
  available: string;
}

export type BudgetPeriod = 'daily' | 'weekly' | 'monthly';
export const BUDGET_PERIODS: readonly BudgetPeriod[] = ['daily', 'weekly', 'monthly'];

/** A budget as GET /v1/account/budgets answers it (docs/governance.md "Budgets"); amounts are decimal strings. */
export interface Budget {
  scope: 'account' | 'key';
  key_id: string | null;
  period: BudgetPeriod;
  limit: string;
  thresholds: number[];
  hard_stop: boolean;
  spent: string;
  period_start: string;
  fired_thresholds: number[];
  updated_at: number;
}

/** A fired threshold (the ledger's alert outbox row). */
export interface BudgetAlert {
  id: string;
  scope: 'account' | 'key';
  key_id: string | null;
  period: BudgetPeriod;
  period_start: string;
  threshold: number;
  limit: string;
  spent: string;
  fired_at: number;
  delivery_state: string;
}

/** The account's low-balance threshold (docs/governance.md "Low balance"): null when none. */
export interface LowBalance {
  threshold: string | null;
  balance: string;
  below: boolean;
}

export interface BudgetBody {
  period: BudgetPeriod;
  limit: string;
  thresholds: number[];
  hard_stop: boolean;
}

/** One entry of the audit log (docs/governance.md "Reading and verifying"). */
export interface AuditEntry {
  id: string;
  chain: string;
  seq: number;
  created_at: number;
  occurred_at: string;
  actor: { type: string; id: string | null };
  action: string;
  target: { type: string; id: string };
  account_id: string | null;
  before: unknown;
  after: unknown;
  request_id: string | null;
  source_address: string | null;
  prev_hash: string;
  hash: string;
}

export const AUDIT_CHAINS = ['auth', 'ledger', 'catalog'] as const;
export type AuditChain = (typeof AUDIT_CHAINS)[number];

/** One page of one chain as GET /v1/admin/audit answers it, oldest first, with the chain's head. */
export interface AdminAuditPage {
  chain: AuditChain;
  data: AuditEntry[];
  head: { seq: number; hash: string };
  next_after_seq: number | null;
}

/** OpenAI's file object as GET /v1/files answers it. */
export interface FileObject {
  id: string;
  bytes: number;
  created_at: number;
  expires_at: number | null;
  filename: string;
  purpose: string;
  status: string;
}

/** OpenAI's batch object; `usage.cost` is the credits charged for its lines so far. */
export interface Batch {
  id: string;
  endpoint: string;
  status: string;
  input_file_id: string;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  completed_at: number | null;
  failed_at: number | null;
  cancelled_at: number | null;
  expired_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  errors: { data: { code: string; message: string; line: number | null }[] } | null;
  usage?: { cost: string };
}

/** A list answered OpenAI's way: `has_more`, and the next page starts after the last id. */
export interface OpenAIList<T> {
  data: T[];
  has_more: boolean;
}

/** The statuses in which a batch may still be cancelled (docs/jobs.md). */
export const CANCELLABLE_BATCH_STATUSES: readonly string[] = ['validating', 'in_progress'];

/** The events an endpoint may subscribe to (docs/governance.md "Webhooks"): the list the ledger checks. */
export { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '@gateway/platform/account-api';

/** A webhook endpoint as GET /v1/account/webhooks answers it; `secret` only in the answer that created or rotated it. */
export interface WebhookEndpoint {
  id: string;
  url: string;
  event_types: string[];
  enabled: boolean;
  created_at: number | null;
  updated_at: number | null;
  secret?: string;
  /** In a rotation's answer: until when (seconds) deliveries are signed with the old secret too. */
  previous_secret_expires_at?: number | null;
}

/** One delivery of an event to an endpoint; times in seconds, null where not (yet) set. */
export interface WebhookDelivery {
  id: string;
  event_id: string;
  event_type: string;
  state: 'pending' | 'delivered' | 'dead' | string;
  dead_lettered: boolean;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  last_attempt_at: number | null;
  next_attempt_at: number | null;
  created_at: number | null;
  finished_at: number | null;
}

/** An account's roles, strongest first (libs/platform/src/roles.ts ACCOUNT_ROLES). */
export const MEMBER_ROLES = ['owner', 'admin', 'billing', 'viewer'] as const;
export type MemberRole = (typeof MEMBER_ROLES)[number];

/** A member or invitation as GET /v1/account/members answers it (docs/governance.md "Members"). */
export interface Member {
  id: string;
  role: MemberRole | string;
  email: string | null;
  issuer: string | null;
  subject: string | null;
  status: 'invited' | 'active' | string;
  created_at: number;
  updated_at: number;
  joined_at: number | null;
}

export const ROUTING_STRATEGIES = ['reliability', 'balanced', 'latency', 'throughput', 'cache'] as const;

/** The API's error in words: its message, or what the status means when the body has none. */
function describe(status: number, body: unknown, credentialName: string): string {
  const message = (body as { error?: { message?: unknown } } | undefined)?.error?.message;
  if (typeof message === 'string' && message !== '') return message;
  if (status === 401) return `The ${credentialName} was not accepted.`;
  if (status === 403) return `The ${credentialName} may not do this.`;
  if (status === 404) return 'Not found.';
  if (status === 429) return 'Too many requests; try again in a moment.';
  return `The gateway answered ${status}.`;
}

async function call<T>(method: string, path: string, body?: unknown, credential: Credential | null = provisioningKey): Promise<T> {
  const headers: Record<string, string> = {};
  const secret = credential?.value();
  if (secret) headers.authorization = `Bearer ${secret}`;
  // Without a pasted credential, a signed-in person's session cookie goes along (and its CSRF token on writes).
  const session = credential !== null && !secret ? identitySession.current() : undefined;
  if (session !== undefined && method !== 'GET') headers['x-csrf-token'] = session.csrf_token;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: session === undefined ? 'omit' : 'same-origin',
    });
  } catch {
    throw new ApiError(0, 'The gateway could not be reached.');
  }
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const credentialName = session !== undefined ? 'session' : credential === adminToken ? 'admin token' : credential === apiKey ? 'API key' : 'provisioning key';
  if (!response.ok) throw new ApiError(response.status, describe(response.status, parsed, credentialName));
  return parsed as T;
}

export const api = {
  balance: () => call<{ balance: string }>('GET', '/v1/account/balance'),
  keys: () => call<{ data: KeyRecord[] }>('GET', '/v1/account/keys?include_disabled=true&limit=100'),
  createKey: (body: { name: string; credit_limit: string | null; default_routing_strategy?: string }) =>
    call<KeyRecord>('POST', '/v1/account/keys', body),
  updateKey: (id: string, body: Record<string, unknown>) => call<KeyRecord>('PATCH', `/v1/account/keys/${encodeURIComponent(id)}`, body),
  deleteKey: (id: string) => call<{ deleted: boolean }>('DELETE', `/v1/account/keys/${encodeURIComponent(id)}`),
  activity: (days: number, keyId?: string) =>
    call<{ data: ActivityRow[] }>('GET', `/v1/account/activity?days=${days}${keyId ? `&key_id=${encodeURIComponent(keyId)}` : ''}`),
  generation: (id: string) => call<{ data: Generation }>('GET', `/v1/generation?id=${encodeURIComponent(id)}`),
  generations: (limit: number, cursor?: string, keyId?: string) =>
    call<Page<Generation>>('GET', `/v1/account/generations${query({ limit: String(limit), cursor, key_id: keyId })}`),
  models: () => call<{ data: Model[] }>('GET', '/v1/models', undefined, null),
  startups: () => call<{ data: Startup[] }>('GET', '/v1/startups', undefined, null),
  budgets: () => call<{ data: Budget[]; alerts: BudgetAlert[] }>('GET', '/v1/account/budgets'),
  /** Creates or replaces the budget of the account (keyId undefined) or of one of its keys. */
  setBudget: (keyId: string | undefined, body: BudgetBody) => call<Budget>('PUT', budgetPath(keyId), body),
  deleteBudget: (keyId: string | undefined) => call<{ deleted: boolean }>('DELETE', budgetPath(keyId)),
  lowBalance: () => call<LowBalance>('GET', LOW_BALANCE_PATH),
  /** Sets the low-balance threshold (decimal credits), or clears it with null. */
  setLowBalance: (threshold: string | null) => threshold === null ? call<LowBalance>('DELETE', LOW_BALANCE_PATH) : call<LowBalance>('PUT', LOW_BALANCE_PATH, { threshold }),
  audit: (limit: number, cursor?: string) =>
    call<Page<AuditEntry> & { has_more: boolean }>('GET', `/v1/account/audit${query({ limit: String(limit), cursor })}`),
  webhooks: () => call<{ data: WebhookEndpoint[] }>('GET', '/v1/account/webhooks'),
  /** Answers the endpoint with its signing secret, which no later answer holds. */
  createWebhook: (body: { url: string; event_types: string[]; enabled?: boolean }) => call<WebhookEndpoint>('POST', '/v1/account/webhooks', body),
  updateWebhook: (id: string, body: { url?: string; event_types?: string[]; enabled?: boolean }) =>
    call<WebhookEndpoint>('PATCH', `/v1/account/webhooks/${encodeURIComponent(id)}`, body),
  deleteWebhook: (id: string) => call<{ deleted: boolean }>('DELETE', `/v1/account/webhooks/${encodeURIComponent(id)}`),
  webhookDeliveries: (id: string, limit: number, cursor?: string) =>
    call<Page<WebhookDelivery> & { has_more: boolean }>('GET', `/v1/account/webhooks/${encodeURIComponent(id)}/deliveries${query({ limit: String(limit), cursor })}`),
  rotateWebhookSecret: (id: string) => call<WebhookEndpoint>('POST', `/v1/account/webhooks/${encodeURIComponent(id)}/rotate-secret`),
  redeliverWebhook: (id: string, deliveryId: string) =>
    call<{ id: string; state: string }>('POST', `/v1/account/webhooks/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(deliveryId)}/redeliver`),
  members: () => call<{ data: Member[] }>('GET', '/v1/account/members'),
  /** An invitation by email: the person's first sign-in with that (verified) email binds it. */
  inviteMember: (email: string, role: MemberRole) => call<Member>('POST', '/v1/account/members', { email, role }),
  updateMember: (id: string, role: MemberRole) =>
    call<Member & { sessions_revoked: number }>('PATCH', `/v1/account/members/${encodeURIComponent(id)}`, { role }),
  removeMember: (id: string) => call<{ deleted: boolean; sessions_revoked: number }>('DELETE', `/v1/account/members/${encodeURIComponent(id)}`),
};

const LOW_BALANCE_PATH = '/v1/account/budgets/low-balance';
const budgetPath = (keyId: string | undefined) =>
  keyId === undefined ? '/v1/account/budgets/account' : `/v1/account/budgets/keys/${encodeURIComponent(keyId)}`;

/**
 * The OpenAI Files and Batch routes, which take an API key of the account (not the provisioning key nor a
 * session): every file and batch of the account is listed whichever of its keys asks.
 */
export const jobsApi = {
  files: (limit: number, after?: string) =>
    call<OpenAIList<FileObject>>('GET', `/v1/files${query({ limit: String(limit), after })}`, undefined, apiKey),
  batches: (limit: number, after?: string) =>
    call<OpenAIList<Batch>>('GET', `/v1/batches${query({ limit: String(limit), after })}`, undefined, apiKey),
  cancelBatch: (id: string) => call<Batch>('POST', `/v1/batches/${encodeURIComponent(id)}/cancel`, undefined, apiKey),
  /** The first `maxBytes` of a file's content as text, and whether there was more (the rest is never read). */
  fileContent: (id: string, maxBytes: number) => readPrefix(`/v1/files/${encodeURIComponent(id)}/content`, apiKey, maxBytes),
};

/**
 * GETs `path` and reads at most `maxBytes` of its body, cancelling the rest: a 200 MiB file costs the
 * page no more than what it shows.
 */
export async function readPrefix(path: string, credential: Credential, maxBytes: number): Promise<{ text: string; truncated: boolean; bytes: number }> {
  const secret = credential.value();
  let response: Response;
  try {
    response = await fetch(path, { headers: secret ? { authorization: `Bearer ${secret}` } : {}, credentials: 'omit' });
  } catch {
    throw new ApiError(0, 'The gateway could not be reached.');
  }
  if (!response.ok) {
    const text = await response.text();
    let parsed: unknown;
    try { parsed = JSON.parse(text); } catch { parsed = undefined; }
    throw new ApiError(response.status, describe(response.status, parsed, 'API key'));
  }
  const declared = Number(response.headers.get('content-length') ?? NaN);
  const reader = response.body?.getReader();
  const chunks: Uint8Array[] = [];
  let read = 0;
  let truncated = false;
  if (reader) {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const room = maxBytes - read;
      if (value.length > room) {
        chunks.push(value.subarray(0, room));
        read += room;
        truncated = true;
        await reader.cancel();
        break;
      }
      chunks.push(value);
      read += value.length;
    }
  }
  if (!truncated && Number.isFinite(declared) && declared > read) truncated = true;
  const joined = new Uint8Array(read);
  let offset = 0;
  for (const chunk of chunks) { joined.set(chunk, offset); offset += chunk.length; }
  // A cut through a multi-byte character shows as one replacement character at the end, never an error.
  return { text: new TextDecoder().decode(joined), truncated, bytes: Number.isFinite(declared) ? declared : read };
}

/** The operator's routes, with the admin token. */
export const adminApi = {
  providers: () => call<{ data: ProviderHealth[] }>('GET', '/v1/admin/providers', undefined, adminToken),
  latency: (days: number) => call<{ days: number; data: ModelLatency[] }>('GET', `/v1/admin/models/latency?days=${days}`, undefined, adminToken),
  accounts: (limit: number, cursor?: string) =>
    call<Page<AdminAccount>>('GET', `/v1/admin/accounts${query({ limit: String(limit), cursor })}`, undefined, adminToken),
  addCredits: (accountId: string, amount: string, idempotencyKey: string) =>
    call<{ account_id: string; balance: string }>('POST', `/v1/admin/accounts/${encodeURIComponent(accountId)}/credits`,
      { amount, idempotency_key: idempotencyKey }, adminToken),
  audit: (chain: AuditChain, limit: number, afterSeq?: number, accountId?: string) =>
    call<AdminAuditPage>('GET', `/v1/admin/audit${query({ chain, limit: String(limit), after_seq: afterSeq === undefined ? undefined : String(afterSeq), account_id: accountId })}`,
      undefined, adminToken),
};

/** A query string of the parameters that have a value ("" when none). */
function query(parameters: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(parameters)) if (value !== undefined && value !== '') search.set(name, value);
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}

/** A fresh idempotency key: crypto.randomUUID where the page is a secure context, else the same shape from getRandomValues. */
export function newIdempotencyKey(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
