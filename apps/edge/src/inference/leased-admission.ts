import type { LedgerServiceClient, Pricing, Usage } from '@gateway/proto';
import { ErrorReason, formatCredits, GatewayError, GrpcStatus, parseCredits, type Logger, type PromiseClient } from '@gateway/platform';
import type { Admission, AdmissionRequest, AdmissionTicket } from './admission.js';
import type { VerifiedApiKey } from './auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import { MINIMUM_HOLD_PICO } from './request-bounds.js';

/** The least a paid request holds while it runs (spec §8), as Ledger.Admit reserves it. */
const HOLD_PICO = MINIMUM_HOLD_PICO;
const MS_PER_HOUR = 3_600_000n;
/** Bound on (account, key, limit group) slots kept; an idle slot is dropped when its leases are returned. */
const MAX_SLOTS = 10_000;
/**
 * Acquisitions per admit. Each one is progress: a grant from the account's free balance (the ledger
 * halves a small one, so distributing it takes a few rounds), or the end of the wait (below). This is a
 * backstop, never a path to a 5xx: past it the request is refused like any request that found no room.
 */
const MAX_ACQUIRE_ROUNDS = 20;
/** Largest lease asked for, however many requests wait (the ledger allows up to 1,000 credits). */
const MAX_LEASE_PICO = parseCredits('100');
/**
 * Waits between acquisitions the ledger answered `recalling` (capacity held by leases being recalled):
 * about 300 ms in all, then one last try without recall, whose refusal is the caller's 402.
 */
const RECALL_RETRY_DELAYS_MS = [20, 40, 80, 160];
/**
 * A recalled lease returned within this long of its last finished request may still have charges on
 * the bus: it is returned with its spent estimate, so the ledger keeps that part (until they settle)
 * from the replica that asked. Later they have settled (it takes milliseconds), and it is closed outright.
 */
const UNSETTLED_WINDOW_MS = 5_000;
/**
 * Requests a slot's first lease asks for at least (with rate limits): enough that a key sending a few
 * requests acquires once, few enough that many such keys do not fill a window with requests they never use.
 */
const MIN_LEASE_REQUESTS = 16;

export interface LeasedAdmissionOptions {
  ledger: PromiseClient<LedgerServiceClient>;
  logger: Logger;
  /** Who holds the leases (this replica), for operators. */
  holder: string;
  /** Free models (nothing to reserve) keep the per-request path. */
  fallback: Admission;
  /** Least credits asked per lease (more when more requests wait). Default 1 (20 concurrent holds). */
  leaseCredits?: string;
  /** Requests asked per lease when the tier has rate limits. Default 1,000. */
  leaseRequests?: number;
  /** A lease without requests in flight for this long is returned. Default 10 s. */
  idleReturnMs?: number;
  /** A lease takes no new request after this age (rate windows and the ledger's lease deadline move on). Default 60 s. */
  maxLeaseAgeMs?: number;
  now?: () => number;
}

interface Lease {
  id: string;
  grantedPico: bigint;
  /** Granted minus the estimated cost of every finished request. */
  budgetPico: bigint;
  holdsPico: bigint;
  inFlight: number;
  /** null: the tier has no rate limits. */
  requestsLeft: number | null;
  /** 0: never. */
  requestsValidUntilMs: number;
  acquiredAtMs: number;
  lastUsedMs: number;
  /** When a request on it last finished; 0: none yet. */
  lastFinishedMs: number;
  retired: boolean;
  /** A LeaseRecall named it: returned as soon as no request runs on it. */
  recalled: boolean;
}

interface Slot {
  accountId: string;
  keyId: string;
  current: Lease | null;
  acquiring: Promise<Acquisition> | null;
  leases: Set<Lease>;
  /** Callers waiting for the acquisition in flight: the lease is sized to hold them all. */
  waiting: number;
  /** Requests the next lease asks for at least; doubles each time a lease ran out of requests (busy slot). */
  requestsFloor: number;
}

interface Hold {
  slotKey: string;
  lease: Lease;
  model: CatalogModel;
  /** What the request holds on the lease while it runs: max(0.05, its worst-case cost). */
  holdPico: bigint;
}

/** How an acquisition ended, as every waiter on it sees it. */
interface Acquisition {
  /**
   * The ledger first answered `recalling`: the account's (or key's, or window's) free capacity was used
   * up and what was granted came back from leases of requests that have finished since. A waiter that
   * still finds no room after such a round is refused (402, or 429 for requests): with Ledger.Admit it
   * would have been refused when it arrived (spec §1), and waiting longer only turns a burst into a queue.
   */
  recalled: boolean;
  /** Granted fewer requests than asked (the rate window is nearly full). */
  shortOfRequests: boolean;
}

/**
 * DESIGN §2 leased budgets: per (account, key, limit group) this replica holds a lease — a block of
 * reservation capacity (and, with rate limits, of requests) the ledger granted it — and admits paid
 * requests locally against it: a 0.05 hold while the request runs, then the request's estimated cost
 * (an upper bound of the real charge, in pico arithmetic) comes off the local budget. The ledger still
 * charges every request from its usage event; the event names the lease, so the charge shrinks the
 * lease instead of counting twice. One acquisition in flight per slot; callers wait on it.
 *
 * Choices: rate limits are leased in bulk too (as many as the slot needs, up to a quarter of the
 * tightest limit per lease, unused ones handed back on return), so a limited tier stays off the
 * per-request path. Free models keep
 * Ledger.Admit (nothing to hold). A lease takes no new request after maxLeaseAgeMs or when its budget
 * cannot hold 0.05 more; it is returned once its requests are done and it was idle a while, so their
 * charges usually settle against it first. The ledger's lease deadline is its reservation lifetime,
 * so a crashed replica's leases come back like its reservations. A replica may hold capacity it does
 * not use for up to idleReturnMs; when another replica's acquisition then finds too little, the ledger
 * answers `recalling` and broadcasts a LeaseRecall: every replica retires its leases of that account
 * (`recall`), returns the idle ones at once and the busy ones when their last request finishes, while
 * the asking replica retries for about 300 ms before its 402. A lease returned soon after a request
 * finished names its estimated spend, so the ledger keeps that part until the charges settle.
 */
export class LeasedAdmission implements Admission {
  private readonly slots = new Map<string, Slot>();
  /** Slot keys per account: a recall finds the account's slots without walking all of them. */
  private readonly slotsByAccount = new Map<string, Set<string>>();
  private readonly holds = new Map<string, Hold>();
  private readonly leasePico: bigint;
  private readonly leaseRequests: number;
  private readonly idleReturnMs: number;
  private readonly maxLeaseAgeMs: number;
  private readonly now: () => number;
  private readonly timer: NodeJS.Timeout;
  private readonly returning = new Set<Promise<void>>();
  private stopped = false;

  constructor(private readonly options: LeasedAdmissionOptions) {
    this.leasePico = parseCredits(options.leaseCredits ?? '1');
    if (this.leasePico < HOLD_PICO || this.leasePico > MAX_LEASE_PICO) throw new Error(`leaseCredits must be between 0.05 and 100: ${options.leaseCredits}`);
    this.leaseRequests = options.leaseRequests ?? 1_000;
    this.idleReturnMs = options.idleReturnMs ?? 10_000;
    this.maxLeaseAgeMs = options.maxLeaseAgeMs ?? 60_000;
    this.now = options.now ?? Date.now;
    this.timer = setInterval(() => this.returnIdle(), Math.max(100, Math.floor(this.idleReturnMs / 2)));
    this.timer.unref();
  }

  async admit(request: AdmissionRequest): Promise<AdmissionTicket> {
    const { requestId, key, model } = request;
    // A hold above what one lease may carry goes through Ledger.Admit with its amount (rare: a request
    // whose worst case is over 100 credits).
    if (!model.paid || this.stopped || request.holdPico > MAX_LEASE_PICO) return this.options.fallback.admit(request);
    const holdPico = request.holdPico > HOLD_PICO ? request.holdPico : HOLD_PICO;
    const limits = model.limitGroup?.tiers[key.tier];
    const slotKey = `${key.accountId}\u0000${key.keyId}\u0000${limits ? model.model.limitGroup : ''}`;
    let outcome: Acquisition | undefined;
    for (let round = 0; ; round++) {
      const slot = this.slot(slotKey, key);
      const lease = slot.current;
      if (lease && this.usable(lease, holdPico)) {
        lease.holdsPico += holdPico;
        lease.inFlight++;
        if (lease.requestsLeft !== null) lease.requestsLeft--;
        lease.lastUsedMs = this.now();
        this.holds.set(requestId, { slotKey, lease, model, holdPico });
        return { reservedCredits: formatCredits(holdPico), leaseId: lease.id };
      }
      const outOfRequests = lease !== null && lease.requestsLeft !== null && lease.requestsLeft <= 0;
      if (lease) {
        if (outOfRequests) slot.requestsFloor = Math.min(slot.requestsFloor * 2, this.leaseRequests);
        this.retire(slotKey, slot, lease);
      }
      if (outcome && (outcome.recalled || round >= MAX_ACQUIRE_ROUNDS)) {
        throw outOfRequests && outcome.shortOfRequests ? windowFull(lease) : heldByRunningRequests(holdPico);
      }
      slot.waiting++;
      try {
        slot.acquiring ??= this.acquire(slotKey, slot, request, holdPico).finally(() => { slot.acquiring = null; });
        outcome = await slot.acquiring;
      } finally {
        slot.waiting--;
        // A refused acquisition leaves an empty slot: drop it, or refusals would grow the map without bound.
        if (slot.waiting === 0 && slot.leases.size === 0 && !slot.acquiring && this.slots.get(slotKey) === slot) this.dropSlot(slotKey, slot);
      }
    }
  }

  /**
   * The request ended without an answer: its hold goes, nothing is spent. A request admitted through
   * the fallback (a free model, a hold too large for a lease) holds a ledger reservation instead — 0
   * credits for a free model whose rate windows count it — which only the fallback's release closes
   * before the sweeper's deadline (found by the invariant fuzzer, issue 35).
   */
  async release(request: { requestId: string; key: VerifiedApiKey }): Promise<void> {
    if (this.holds.has(request.requestId)) this.finish(request.requestId, 0n);
    else await this.options.fallback.release(request);
  }

  /** The request ended with (or without knowing) its usage: the estimate comes off the lease's budget. */
  settle({ requestId, usage }: { requestId: string; usage: Usage | undefined }): void {
    const hold = this.holds.get(requestId);
    if (!hold) return;
    // Unknown usage (a stream cut short): assume the whole hold was spent.
    const cost = usage ? estimateCostPico(usage, hold.model.model.pricing) : hold.holdPico;
    this.finish(requestId, cost);
  }

  /**
   * A LeaseRecall for the account (for one key when keyId is set): its leases take no new request;
   * idle ones go back now, busy ones when their last request finishes. Requests that arrive later
   * acquire a new lease (sized from what is then available).
   */
  recall(accountId: string, keyId: string): void {
    for (const slotKey of [...(this.slotsByAccount.get(accountId) ?? [])]) {
      const slot = this.slots.get(slotKey);
      if (!slot || (keyId !== '' && slot.keyId !== keyId)) continue;
      for (const lease of [...slot.leases]) {
        lease.recalled = true;
        this.retire(slotKey, slot, lease);
        if (lease.inFlight === 0) this.returnLease(slotKey, slot, lease, true);
      }
    }
  }

  /** Returns every lease (what their settled charges did not use goes back to the account). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    for (const slot of this.slots.values()) await slot.acquiring?.catch(() => undefined);
    for (const [slotKey, slot] of this.slots) {
      for (const lease of slot.leases) this.returnLease(slotKey, slot, lease);
    }
    await Promise.all([...this.returning]);
  }

  private finish(requestId: string, costPico: bigint): void {
    const hold = this.holds.get(requestId);
    if (!hold) return;
    this.holds.delete(requestId);
    const lease = hold.lease;
    lease.holdsPico -= hold.holdPico;
    lease.inFlight--;
    lease.budgetPico -= costPico;
    lease.lastUsedMs = this.now();
    lease.lastFinishedMs = lease.lastUsedMs;
    if (lease.recalled && lease.inFlight === 0) {
      const slot = this.slots.get(hold.slotKey);
      if (slot?.leases.has(lease)) this.returnLease(hold.slotKey, slot, lease, true);
    }
  }

  private usable(lease: Lease, holdPico: bigint): boolean {
    const now = this.now();
    if (lease.retired || now - lease.acquiredAtMs >= this.maxLeaseAgeMs) return false;
    if (lease.requestsLeft !== null && (lease.requestsLeft <= 0 || (lease.requestsValidUntilMs > 0 && now >= lease.requestsValidUntilMs))) return false;
    return lease.budgetPico - lease.holdsPico >= holdPico;
  }

  private slot(slotKey: string, key: VerifiedApiKey): Slot {
    let slot = this.slots.get(slotKey);
    if (!slot) {
      if (this.slots.size >= MAX_SLOTS) this.returnIdle(true);
      slot = { accountId: key.accountId, keyId: key.keyId, current: null, acquiring: null, leases: new Set(), waiting: 0, requestsFloor: MIN_LEASE_REQUESTS };
      this.slots.set(slotKey, slot);
      let keys = this.slotsByAccount.get(key.accountId);
      if (!keys) this.slotsByAccount.set(key.accountId, (keys = new Set()));
      keys.add(slotKey);
    }
    return slot;
  }

  private async acquire(slotKey: string, slot: Slot, { requestId, key, model }: AdmissionRequest, holdPico: bigint): Promise<Acquisition> {
    const limits = model.limitGroup?.tiers[key.tier];
    // Room for everyone waiting now, twice over, so a burst does not acquire once per 20 requests
    // (each counted at the hold of the request that asked: holds differ only for large requests).
    let inFlight = 0;
    for (const lease of slot.leases) inFlight += lease.inFlight;
    let wantedPico = holdPico * BigInt(2 * (slot.waiting + inFlight) + 1);
    if (wantedPico < this.leasePico) wantedPico = this.leasePico;
    if (wantedPico > MAX_LEASE_PICO) wantedPico = MAX_LEASE_PICO > holdPico ? MAX_LEASE_PICO : holdPico;
    let wantedRequests = 0;
    if (limits) wantedRequests = this.requestsPerLease(limits.minute, limits.day, Math.max(slot.requestsFloor, 2 * (slot.waiting + inFlight) + 1));
    const ask = (recallIfHeld: boolean) => this.options.ledger.acquireLease(
      {
        accountId: key.accountId,
        keyId: key.keyId,
        holder: this.options.holder,
        requestedCredits: formatCredits(wantedPico),
        limitGroup: limits ? model.model.limitGroup : '',
        ...(limits ? { requestsPerMinute: limits.minute } : {}),
        ...(limits?.day !== undefined ? { requestsPerDay: limits.day } : {}),
        requestedRequests: wantedRequests,
        ...(key.creditLimit !== undefined ? { keyCreditLimit: key.creditLimit } : {}),
        ...(key.creditLimit !== undefined && key.limitReset ? { keyLimitReset: key.limitReset } : {}),
        ...(holdPico > HOLD_PICO ? { minimumCredits: formatCredits(holdPico) } : {}),
        recallIfHeld,
      },
      { requestId, deadlineMs: 5_000 },
    );
    let response = await ask(true);
    const recalled = response.recalling;
    for (let retry = 0; response.recalling && retry < RECALL_RETRY_DELAYS_MS.length; retry++) {
      await new Promise((resolve) => setTimeout(resolve, RECALL_RETRY_DELAYS_MS[retry]));
      // The last try asks without recall: a refusal then is the plain one (402 with the ledger's words).
      response = await ask(retry < RECALL_RETRY_DELAYS_MS.length - 1);
    }
    if (response.recalling || !response.leaseId) throw new Error('leased admission: the ledger granted no lease');
    const now = this.now();
    const grantedPico = parseCredits(response.grantedCredits);
    const lease: Lease = {
      id: response.leaseId,
      grantedPico,
      budgetPico: grantedPico,
      holdsPico: 0n,
      inFlight: 0,
      requestsLeft: limits ? response.grantedRequests : null,
      requestsValidUntilMs: Number(response.requestsValidUntilMs),
      acquiredAtMs: now,
      lastUsedMs: now,
      lastFinishedMs: 0,
      retired: false,
      recalled: false,
    };
    slot.leases.add(lease);
    const outcome: Acquisition = { recalled, shortOfRequests: limits !== undefined && response.grantedRequests < wantedRequests };
    if (this.stopped) {
      this.returnLease(slotKey, slot, lease);
      return outcome;
    }
    if (slot.current) this.retire(slotKey, slot, slot.current);
    slot.current = lease;
    return outcome;
  }

  /**
   * What the slot needs (`demand`: everyone waiting and running twice over, more for a slot that keeps
   * running out), at most a quarter of the tightest limit and leaseRequests: several replicas and keys
   * of one account share the windows, and unused requests only come back when a lease is returned (or
   * recalled), so a key that sends one request must not take a quarter of the minute.
   */
  private requestsPerLease(perMinute: number | undefined, perDay: number | undefined, demand: number): number {
    let wanted = Math.min(this.leaseRequests, demand);
    for (const limit of [perMinute, perDay]) {
      if (limit !== undefined) wanted = Math.min(wanted, Math.max(1, Math.floor(limit / 4)));
    }
    return wanted;
  }

  /** Takes no new request; returned once its requests are done (after the idle delay, so their charges settle first). */
  private retire(_slotKey: string, slot: Slot, lease: Lease): void {
    lease.retired = true;
    if (slot.current === lease) slot.current = null;
  }

  private returnIdle(all = false): void {
    const now = this.now();
    for (const [slotKey, slot] of this.slots) {
      for (const lease of slot.leases) {
        if (lease.inFlight > 0) continue;
        const idle = now - lease.lastUsedMs >= this.idleReturnMs;
        const aged = now - lease.acquiredAtMs >= this.maxLeaseAgeMs;
        if (all || idle || (aged && now - lease.lastUsedMs >= Math.min(this.idleReturnMs, 2_000))) this.returnLease(slotKey, slot, lease);
      }
    }
  }

  private dropSlot(slotKey: string, slot: Slot): void {
    this.slots.delete(slotKey);
    const keys = this.slotsByAccount.get(slot.accountId);
    keys?.delete(slotKey);
    if (keys?.size === 0) this.slotsByAccount.delete(slot.accountId);
  }

  /**
   * `recalled`: another replica waits for the capacity, so the estimated spend of recent requests is
   * named and stays reserved until it settles. Idle returns (10 s after the last request) and stop()
   * close outright, as their charges have settled or settle within milliseconds.
   */
  private returnLease(slotKey: string, slot: Slot, lease: Lease, recalled = false): void {
    slot.leases.delete(lease);
    if (slot.current === lease) slot.current = null;
    if (slot.leases.size === 0 && !slot.acquiring) this.dropSlot(slotKey, slot);
    const now = this.now();
    const unusedRequests = lease.requestsLeft !== null && (lease.requestsValidUntilMs === 0 || now < lease.requestsValidUntilMs) ? lease.requestsLeft : 0;
    const spentPico = lease.grantedPico - lease.budgetPico;
    const unsettled = recalled && spentPico > 0n && lease.lastFinishedMs > 0 && now - lease.lastFinishedMs < UNSETTLED_WINDOW_MS;
    const returned = this.options.ledger.returnLease(
      { leaseId: lease.id, unusedRequests, ...(unsettled ? { spentCredits: formatCredits(spentPico) } : {}) },
      { deadlineMs: 5_000 },
    )
      .then(() => undefined)
      .catch((error: unknown) => {
        // The ledger's sweeper closes it at its deadline anyway.
        this.options.logger.warn({ err: error, lease_id: lease.id }, 'return of lease failed; the ledger will expire it');
      })
      .finally(() => this.returning.delete(returned));
    this.returning.add(returned);
  }
}

/** The 402 of a request that found the account's available credits held by its running requests. */
function heldByRunningRequests(holdPico: bigint): GatewayError {
  return new GatewayError(
    GrpcStatus.FAILED_PRECONDITION,
    ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA,
    `Insufficient credits: a paid request needs ${formatCredits(holdPico)} credits available; what the account (or this key's ` +
      'credit limit) has left is held by requests already running. Add credits, or retry when they finish.',
    { code: 'insufficient_quota' },
  );
}

/** The 429 of a request that found the rate window's last requests taken by others. */
function windowFull(lease: Lease | null): GatewayError {
  const leftMs = lease && lease.requestsValidUntilMs > 0 ? lease.requestsValidUntilMs - Date.now() : 1_000;
  const retryAfterSeconds = Math.max(1, Math.ceil(leftMs / 1_000));
  return new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, `Rate limit reached. Please try again in ${retryAfterSeconds}s.`, {
    retryAfterSeconds,
  });
}

const COUNT_FIELDS = [
  'inputTokens', 'cachedInputTokens', 'outputTokens', 'reasoningTokens', 'inputAudioTokens', 'outputAudioTokens',
  'outputTextTokens', 'inputTextCharacters', 'outputTextCharacters', 'outputImageTokens', 'inputImageTokens', 'inputTextTokens',
] as const satisfies ReadonlyArray<keyof Usage>;
const DURATION_FIELDS = ['inputAudioMs', 'outputAudioMs'] as const satisfies ReadonlyArray<keyof Usage>;
const HOUR_PRICES = new Set<keyof Pricing>(['perInputAudioHour', 'perOutputAudioHour']);

/**
 * An upper bound of the ledger's charge, in pico-credits: every metered count times the sum of all the
 * model's per-unit prices, durations times the sum of the per-hour prices, rounded up. The ledger
 * multiplies each count by at most each price once, so the real charge is never above this.
 */
export function estimateCostPico(usage: Usage, pricing: Pricing | undefined): bigint {
  if (!pricing) return 0n;
  const prices = summedPrices(pricing);
  if (prices === undefined) return HOLD_PICO;
  const { unitPrices, hourPrices } = prices;
  let counts = 0n;
  for (const field of COUNT_FIELDS) counts += BigInt(usage[field] ?? 0);
  let durationMs = 0n;
  for (const field of DURATION_FIELDS) durationMs += BigInt(usage[field] ?? 0);
  return counts * unitPrices + (durationMs * hourPrices + MS_PER_HOUR - 1n) / MS_PER_HOUR;
}

/**
 * A model's prices summed once per Pricing object (the catalog cache keeps one per model until the
 * next catalog version): parsing decimal strings per request was ~5% of the edge's CPU. undefined: a
 * price is unreadable, so the whole hold counts as spent (the catalog cache treats the model as paid too).
 */
const summedPriceCache = new WeakMap<Pricing, { unitPrices: bigint; hourPrices: bigint } | undefined>();

function summedPrices(pricing: Pricing): { unitPrices: bigint; hourPrices: bigint } | undefined {
  if (summedPriceCache.has(pricing)) return summedPriceCache.get(pricing);
  let unitPrices = 0n;
  let hourPrices = 0n;
  let summed: { unitPrices: bigint; hourPrices: bigint } | undefined;
  try {
    for (const [name, text] of Object.entries(pricing) as Array<[keyof Pricing, string | undefined]>) {
      if (text === undefined || text === '') continue;
      const pico = parseCredits(text);
      if (pico <= 0n) continue;
      if (HOUR_PRICES.has(name)) hourPrices += pico;
      else unitPrices += pico;
    }
    summed = { unitPrices, hourPrices };
  } catch {
    summed = undefined;
  }
  summedPriceCache.set(pricing, summed);
  return summed;
}
