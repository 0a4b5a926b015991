import type { LedgerServiceClient, Pricing, Usage } from '@gateway/proto';
import { ErrorReason, formatCredits, GatewayError, GrpcStatus, parseCredits, type Logger, type PromiseClient } from '@gateway/platform';
import { limitedGroups, type Admission, type AdmissionRequest, type AdmissionTicket } from './admission.js';
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
 * Recalled acquisitions a waiter takes part in before its 402. A recall's grant is what the other
 * replicas' leases had given back by then; their busy leases come back as their running requests finish,
 * so a waiter that found no room in the first recalled grant tries one more round (the capacity exists:
 * the ledger answers `recalling` only while other leases hold it). A plain refusal is final at once.
 */
const MAX_RECALLED_ROUNDS = 2;
/**
 * Waits between acquisitions the ledger answered `recalling` (capacity held by leases being recalled):
 * about 1.1 s in all, then one last try without recall, whose refusal is the caller's 402. The ledger
 * answers `recalling` only while other leases hold what would cover the request, so a caller waits only
 * when the capacity exists: the recall goes over NATS and the holders return their leases when their
 * running requests finish, which on a loaded machine took longer than 300 ms (a 402 while the balance
 * was there, 1 of 180 requests in lease-recall.e2e.test.ts's two-edge run).
 */
const RECALL_RETRY_DELAYS_MS = [20, 40, 80, 160, 320, 480];
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
/** How often the renewal timer looks whether a renewal is due (one RenewLeases call then renews them all). */
const RENEW_TICK_MS = 200;
/**
 * Admission window assumed when the ledger names none (a ledger from before RenewLeases, whose leases
 * lived 20 minutes): the lease's age bound (maxLeaseAgeMs) is then the only limit, as before.
 */
const UNBOUNDED_VALIDITY_MS = Number.MAX_SAFE_INTEGER;

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
  /** A lease takes no new request after this age (rate windows move on). Default 60 s. */
  maxLeaseAgeMs?: number;
  /**
   * Every held lease is renewed (one RenewLeases call for all of them) at least this often, and at least
   * three times within the ledger's renew_within_ms. Default 5 s.
   */
  renewIntervalMs?: number;
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
  /**
   * No new request after this instant unless a renewal moves it: the sending time of the call that
   * granted or last renewed it plus the ledger's renew_within_ms, which ends a drain time before the
   * ledger may close the lease. A replica cut off from the ledger thus stops admitting on its own.
   */
  validUntilMs: number;
  /** When the renewal timer next renews it (and with it every other lease). */
  renewAtMs: number;
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
  /** The model whose limit group the slot counts (the request's first model unless a fallback's group is the limited one). */
  model: CatalogModel;
  /** Every model that may serve (model fallbacks); undefined: `model` alone. The settle estimate covers the dearest. */
  candidates: readonly CatalogModel[] | undefined;
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
  /**
   * The ledger split a small available balance and kept at least one more hold free after this grant
   * (`more_available`): the account still had room. A waiter that found no room in such a grant tries
   * another round instead of its 402 (issue 36: two edges refused a third of what one edge admitted).
   */
  split: boolean;
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
 * charges usually settle against it first. Every held lease is renewed (one RenewLeases call for all
 * of them, every few seconds): the ledger closes a lease its holder stopped renewing (the replica died)
 * a short lifetime after the last renewal, and the holder admits on a lease only within the window the
 * ledger named (renew_within_ms, a drain time shorter), so a replica cut off from the ledger stops
 * admitting before its leases can be closed. A replica may hold capacity it does
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
  private readonly renewIntervalMs: number;
  private readonly timer: NodeJS.Timeout;
  private readonly renewTimer: NodeJS.Timeout;
  /** The earliest renewAtMs of any lease held (Infinity: none). */
  private nextRenewMs = Number.POSITIVE_INFINITY;
  private renewing = false;
  private readonly returning = new Set<Promise<void>>();
  private stopped = false;

  constructor(private readonly options: LeasedAdmissionOptions) {
    this.leasePico = parseCredits(options.leaseCredits ?? '1');
    if (this.leasePico < HOLD_PICO || this.leasePico > MAX_LEASE_PICO) throw new Error(`leaseCredits must be between 0.05 and 100: ${options.leaseCredits}`);
    this.leaseRequests = options.leaseRequests ?? 1_000;
    this.idleReturnMs = options.idleReturnMs ?? 10_000;
    this.maxLeaseAgeMs = options.maxLeaseAgeMs ?? 60_000;
    this.renewIntervalMs = options.renewIntervalMs ?? 5_000;
    if (!(this.renewIntervalMs >= 100)) throw new Error(`renewIntervalMs must be at least 100: ${options.renewIntervalMs}`);
    this.now = options.now ?? Date.now;
    this.timer = setInterval(() => this.returnIdle(), Math.max(100, Math.floor(this.idleReturnMs / 2)));
    this.timer.unref();
    this.renewTimer = setInterval(() => {
      if (!this.renewing && this.now() >= this.nextRenewMs) void this.renew();
    }, RENEW_TICK_MS);
    this.renewTimer.unref();
  }

  async admit(request: AdmissionRequest): Promise<AdmissionTicket> {
    const { requestId, key, candidates } = request;
    // A hold above what one lease may carry goes through Ledger.Admit with its amount (rare: a request
    // whose worst case is over 100 credits).
    if (!request.paid || this.stopped || request.holdPico > MAX_LEASE_PICO) return this.options.fallback.admit(request);
    // The slot's limit group: with fallbacks, the one limited group among the models that may serve (a
    // free first model's group must not stand in for a paid fallback's). A slot counts one group's
    // requests, so a request whose models span several limited groups goes through Ledger.Admit, which
    // counts it in each.
    let model = request.model;
    if (candidates !== undefined) {
      const groups = limitedGroups(candidates, key.tier);
      if (groups.length > 1) return this.options.fallback.admit(request);
      if (groups.length === 1) model = groups[0]!;
    }
    const holdPico = request.holdPico > HOLD_PICO ? request.holdPico : HOLD_PICO;
    const limits = model.limitGroup?.tiers[key.tier];
    const slotKey = `${key.accountId}\u0000${key.keyId}\u0000${limits ? model.model.limitGroup : ''}`;
    let outcome: Acquisition | undefined;
    let recalledRounds = 0;
    for (let round = 0; ; round++) {
      const slot = this.slot(slotKey, key);
      const lease = slot.current;
      if (lease && this.usable(lease, holdPico)) {
        lease.holdsPico += holdPico;
        lease.inFlight++;
        if (lease.requestsLeft !== null) lease.requestsLeft--;
        lease.lastUsedMs = this.now();
        this.holds.set(requestId, { slotKey, lease, model, candidates, holdPico });
        return { reservedCredits: formatCredits(holdPico), leaseId: lease.id };
      }
      const outOfRequests = lease !== null && lease.requestsLeft !== null && lease.requestsLeft <= 0;
      if (lease) {
        if (outOfRequests) slot.requestsFloor = Math.min(slot.requestsFloor * 2, this.leaseRequests);
        this.retire(slotKey, slot, lease);
      }
      if (outcome?.recalled && !outcome.split) recalledRounds++;
      if (outcome && (recalledRounds >= MAX_RECALLED_ROUNDS || round >= MAX_ACQUIRE_ROUNDS)) {
        throw outOfRequests && outcome.shortOfRequests ? windowFull(lease) : heldByRunningRequests(holdPico);
      }
      slot.waiting++;
      try {
        slot.acquiring ??= this.acquire(slotKey, slot, request, model, holdPico).finally(() => { slot.acquiring = null; });
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
    // Unknown usage (a stream cut short): assume the whole hold was spent. With fallbacks the estimate is
    // the dearest model's that may have served: an upper bound whichever did.
    const cost = !usage ? hold.holdPico : hold.candidates ? dearestEstimatePico(usage, hold.candidates) : estimateCostPico(usage, hold.model.model.pricing);
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
    clearInterval(this.renewTimer);
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
    if (lease.retired || now >= lease.validUntilMs || now - lease.acquiredAtMs >= this.maxLeaseAgeMs) return false;
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

  private async acquire(slotKey: string, slot: Slot, { requestId, key }: AdmissionRequest, model: CatalogModel, holdPico: bigint): Promise<Acquisition> {
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
    let askedAtMs = 0;
    const ask = (recallIfHeld: boolean) => (askedAtMs = this.now(), this.options.ledger.acquireLease(
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
    ));
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
      validUntilMs: response.renewWithinMs > 0 ? askedAtMs + response.renewWithinMs : UNBOUNDED_VALIDITY_MS,
      renewAtMs: askedAtMs + this.renewPeriodMs(response.renewWithinMs),
      lastUsedMs: now,
      lastFinishedMs: 0,
      retired: false,
      recalled: false,
    };
    slot.leases.add(lease);
    if (lease.renewAtMs < this.nextRenewMs) this.nextRenewMs = lease.renewAtMs;
    const outcome: Acquisition = { recalled, shortOfRequests: limits !== undefined && response.grantedRequests < wantedRequests, split: response.moreAvailable };
    if (this.stopped) {
      this.returnLease(slotKey, slot, lease);
      return outcome;
    }
    if (slot.current) this.retire(slotKey, slot, slot.current);
    slot.current = lease;
    return outcome;
  }

  /** Renewals per admission window: three, so two may fail (or be slow) before the holder stops admitting. */
  private renewPeriodMs(renewWithinMs: number): number {
    if (renewWithinMs <= 0) return this.renewIntervalMs;
    return Math.max(100, Math.min(this.renewIntervalMs, Math.floor(renewWithinMs / 3)));
  }

  /**
   * One RenewLeases call for every lease this replica holds (busy and retired ones too: their running
   * requests' charges still move them). A lease the ledger no longer has open for this holder (it was
   * closed past its deadline, or returned) is dropped: nothing more is admitted on it. A failed call
   * changes nothing; the timer tries again shortly, and leases whose window passes stop admitting.
   */
  private async renew(): Promise<void> {
    const held: Array<{ slotKey: string; slot: Slot; lease: Lease }> = [];
    for (const [slotKey, slot] of this.slots) {
      for (const lease of slot.leases) held.push({ slotKey, slot, lease });
    }
    if (held.length === 0) {
      this.nextRenewMs = Number.POSITIVE_INFINITY;
      return;
    }
    this.renewing = true;
    const sentAtMs = this.now();
    try {
      const response = await this.options.ledger.renewLeases({ holder: this.options.holder, leaseIds: held.map((entry) => entry.lease.id) }, { deadlineMs: 5_000 });
      const lost = new Set(response.lostLeaseIds);
      const renewAtMs = sentAtMs + this.renewPeriodMs(response.renewWithinMs);
      const validUntilMs = response.renewWithinMs > 0 ? sentAtMs + response.renewWithinMs : UNBOUNDED_VALIDITY_MS;
      for (const { slotKey, slot, lease } of held) {
        if (lost.has(lease.id)) {
          if (!slot.leases.has(lease)) continue;
          this.options.logger.warn({ lease_id: lease.id }, 'the ledger no longer holds this lease open for this replica; nothing more is admitted on it');
          this.retire(slotKey, slot, lease);
          slot.leases.delete(lease);
          if (slot.leases.size === 0 && !slot.acquiring && slot.waiting === 0) this.dropSlot(slotKey, slot);
          continue;
        }
        if (validUntilMs > lease.validUntilMs) lease.validUntilMs = validUntilMs;
        lease.renewAtMs = renewAtMs;
      }
    } catch (error) {
      // Retried soon; each lease stops admitting when its window passes.
      this.options.logger.warn({ err: error, leases: held.length }, 'lease renewal failed; retrying (leases not renewed in time stop admitting)');
      for (const { lease } of held) lease.renewAtMs = this.now() + Math.min(1_000, this.renewIntervalMs);
    } finally {
      this.renewing = false;
    }
    let next = Number.POSITIVE_INFINITY;
    for (const slot of this.slots.values()) {
      for (const lease of slot.leases) if (lease.renewAtMs < next) next = lease.renewAtMs;
    }
    this.nextRenewMs = next;
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

/** The largest estimate over `models`: an upper bound of the charge whichever of them served. */
export function dearestEstimatePico(usage: Usage, models: readonly CatalogModel[]): bigint {
  let dearest = 0n;
  for (const model of models) {
    const estimate = estimateCostPico(usage, model.model.pricing);
    if (estimate > dearest) dearest = estimate;
  }
  return dearest;
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
