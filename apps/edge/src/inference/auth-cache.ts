import { hash as digest } from 'node:crypto';
import type { AuthServiceClient, VerifyApiKeyResponse } from '@gateway/proto';
import { ErrorReason, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { malformedApiKey } from './credentials.js';

export interface VerifiedApiKey {
  accountId: string;
  keyId: string;
  tier: string;
  /** Decimal credits; absent: no limit. */
  creditLimit?: string;
  defaultRoutingStrategy: string;
  /** The window creditLimit applies to ('daily' | 'weekly' | 'monthly'); absent: the key's lifetime. */
  limitReset?: string;
  /** Unix ms from which the key is refused (key_expired), cached or not; absent: never. */
  expiresAtMs?: number;
}

/** A key past its expires_at: 401 invalid_api_key with code key_expired, as Auth refuses it. */
export const expiredApiKey = () =>
  new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'API key expired.', { code: 'key_expired' });

interface Entry {
  key: VerifiedApiKey;
  expiresAtMs: number;
}

export interface ApiKeyCacheOptions {
  ttlMs: number;
  maxEntries: number;
  now?: () => number;
}

/**
 * Answers of Auth.VerifyApiKey, so a request costs no Auth hop (DESIGN §2). Keyed by a hash of the
 * presented key (the plaintext is never kept), bounded (LRU), short-lived (TTL), and dropped at once
 * for the key ids a `keys.changed` broadcast names so a disabled key stops within a broadcast's time.
 * Refusals are not cached: a key created a moment ago must start working on its next attempt, and a
 * flood of garbage keys must not evict good entries. An entry carries its key's expires_at: from that
 * instant the key is refused (key_expired) at once, however fresh the entry.
 */
export class ApiKeyCache {
  private readonly entries = new Map<string, Entry>();
  /** Concurrent first requests with one key share one Auth call. */
  private readonly pending = new Map<string, Promise<VerifiedApiKey>>();
  /** Bumped by every invalidation, so an answer fetched before it is not stored after it. */
  private generation = 0;
  private readonly now: () => number;

  constructor(
    private readonly auth: PromiseClient<AuthServiceClient>,
    private readonly options: ApiKeyCacheOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The key behind a presented credential; a malformed one (`''`, see credentials.ts) is refused without a call. */
  async verify(plaintext: string, requestId: string): Promise<VerifiedApiKey> {
    if (plaintext === '') throw malformedApiKey();
    // One-shot digest: no Hash object per request.
    const hash = digest('sha256', plaintext, 'base64url');
    const entry = this.entries.get(hash);
    if (entry) {
      const now = this.now();
      if (entry.key.expiresAtMs !== undefined && now >= entry.key.expiresAtMs) {
        this.entries.delete(hash);
        throw expiredApiKey();
      }
      if (entry.expiresAtMs > now) {
        // Refresh recency: the Map's insertion order is the LRU order.
        this.entries.delete(hash);
        this.entries.set(hash, entry);
        return entry.key;
      }
      this.entries.delete(hash);
    }
    const inFlight = this.pending.get(hash);
    if (inFlight) return inFlight;
    const generation = this.generation;
    const lookup = this.auth
      .verifyApiKey({ key: plaintext }, { requestId, deadlineMs: 5_000 })
      .then((response) => {
        const key = toVerified(response);
        if (generation === this.generation) this.store(hash, key);
        return key;
      })
      .finally(() => {
        if (this.pending.get(hash) === lookup) this.pending.delete(hash);
      });
    this.pending.set(hash, lookup);
    return lookup;
  }

  /** `keys.changed`: drop the named keys; no key ids means every key of the account. */
  invalidate(accountId: string, keyIds: readonly string[]): void {
    this.generation++;
    // A lookup started before the change may carry the old answer: later requests must not join it.
    this.pending.clear();
    const named = new Set(keyIds);
    for (const [hash, entry] of this.entries) {
      if (named.size > 0 ? named.has(entry.key.keyId) : entry.key.accountId === accountId) this.entries.delete(hash);
    }
  }

  clear(): void {
    this.generation++;
    this.pending.clear();
    this.entries.clear();
  }

  private store(hash: string, key: VerifiedApiKey): void {
    this.entries.set(hash, { key, expiresAtMs: this.now() + this.options.ttlMs });
    while (this.entries.size > this.options.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }
}

function toVerified(response: VerifyApiKeyResponse): VerifiedApiKey {
  const key: VerifiedApiKey = {
    accountId: response.accountId,
    keyId: response.keyId,
    tier: response.tier,
    defaultRoutingStrategy: response.defaultRoutingStrategy,
  };
  if (response.creditLimit !== undefined) key.creditLimit = response.creditLimit;
  if (response.limitReset) key.limitReset = response.limitReset;
  if (response.expiresAtMs !== undefined) key.expiresAtMs = Number(response.expiresAtMs);
  return key;
}
