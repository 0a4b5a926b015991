import type { LedgerServiceClient, Usage } from '@gateway/proto';
import { formatCredits, type Logger, type PromiseClient } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import { MINIMUM_HOLD_PICO } from './request-bounds.js';

export interface AdmissionRequest {
  requestId: string;
  key: VerifiedApiKey;
  /** The model the request is routed to first. */
  model: CatalogModel;
  /**
   * Every model that may serve the request when it has fallbacks (`models`), `model` first; undefined:
   * `model` alone. Admission covers each of them: a fallback may serve, so it must be paid for and
   * counted before any attempt (issue 35).
   */
  candidates: readonly CatalogModel[] | undefined;
  /** Whether any model that may serve is paid (the hold, the balance and the key's credit limit apply). */
  paid: boolean;
  /**
   * Pico-credits a paid request holds while it runs: max(0.05, the worst-case cost of the dearest model
   * that may serve), from inference/request-bounds.ts. Ignored when `paid` is false.
   */
  holdPico: bigint;
}

/** Whether any of `models` is paid. */
export function anyPaid(models: readonly CatalogModel[]): boolean {
  for (const model of models) if (model.paid) return true;
  return false;
}

/**
 * The distinct limit groups among `models` in which `tier` has rate limits, as the first model of each
 * group (its `limitGroup` carries the limits). A request that may be served by any of them is counted in
 * every one of their windows, as the hold covers the dearest of them: conservative, never short.
 */
export function limitedGroups(models: readonly CatalogModel[], tier: string): CatalogModel[] {
  const groups: CatalogModel[] = [];
  for (const model of models) {
    if (!model.limitGroup?.tiers[tier]) continue;
    let seen = false;
    for (const group of groups) if (group.model.limitGroup === model.model.limitGroup) seen = true;
    if (!seen) groups.push(model);
  }
  return groups;
}

export interface AdmissionTicket {
  /** Decimal credits held for the request ("0" for a free model). */
  reservedCredits: string;
  /** The lease the request was admitted against (leased admission); it goes into the request's context. */
  leaseId?: string;
}

/**
 * Admission of one inference request: rate window, key state and limit, and the 0.05-credit
 * reservation of a paid request (DESIGN §2 step 4). Kept behind this one interface so the per-request
 * Ledger.Admit implementation can be swapped for leased budgets (admit locally against a block of
 * capacity the ledger granted this replica) without touching any route.
 * Rejects with the GatewayError that the error table maps (429, 402, 400).
 */
export interface Admission {
  admit(request: AdmissionRequest): Promise<AdmissionTicket>;
  /** The request ended before a usage event could exist: give the reservation back. Best effort, never throws. */
  release(request: { requestId: string; key: VerifiedApiKey }): Promise<void>;
  /**
   * The request ended after the router answered (usage undefined when unknown, e.g. a stream cut
   * short). Leased admission takes the request's cost off its local budget; no-op for Ledger.Admit,
   * whose reservation the usage event closes. Called once more when the response closes: a repeat is a no-op.
   */
  settle(request: { requestId: string; usage: Usage | undefined }): void;
  /** Gives back what the admission holds (leases). */
  stop(): Promise<void>;
}

/** First implementation: one Ledger.Admit per request. */
export class LedgerAdmission implements Admission {
  constructor(
    private readonly ledger: PromiseClient<LedgerServiceClient>,
    private readonly logger: Logger,
  ) {}

  async admit({ requestId, key, model, candidates, paid, holdPico }: AdmissionRequest): Promise<AdmissionTicket> {
    // With fallbacks, the request's own Admit counts it in the first limited group of its models (or in
    // the first model's group when none is limited); every other limited group is counted below.
    const groups = candidates === undefined ? undefined : limitedGroups(candidates, key.tier);
    const counted = groups === undefined || groups.length === 0 ? model : groups[0]!;
    const limits = counted.limitGroup?.tiers[key.tier];
    const response = await this.ledger.admit(
      {
        context: { requestId, accountId: key.accountId, keyId: key.keyId },
        modelId: model.id,
        paid,
        tier: key.tier,
        limitGroup: counted.model.limitGroup,
        ...(limits ? { requestsPerMinute: limits.minute } : {}),
        ...(limits?.day !== undefined ? { requestsPerDay: limits.day } : {}),
        ...(key.creditLimit !== undefined ? { keyCreditLimit: key.creditLimit } : {}),
        ...(key.creditLimit !== undefined && key.limitReset ? { keyLimitReset: key.limitReset } : {}),
        ...(paid && holdPico > MINIMUM_HOLD_PICO ? { reserveCredits: formatCredits(holdPico) } : {}),
      },
      { requestId, deadlineMs: 5_000 },
    );
    if (groups !== undefined && groups.length > 1) await this.countInOtherGroups(requestId, key, groups);
    return { reservedCredits: response.reservedCredits };
  }

  /**
   * Counts an admitted request in the rate window of every limited group of its models past the first:
   * one free Admit per group under a request id derived from the request's (a repeat of the request
   * counts once, as the ledger's reservation row is its idempotency record). Its row holds nothing and
   * is released at once (a release does not uncount a window). A full window refuses the whole request
   * (429) and gives back what it was admitted with.
   */
  private async countInOtherGroups(requestId: string, key: VerifiedApiKey, groups: readonly CatalogModel[]): Promise<void> {
    for (let index = 1; index < groups.length; index++) {
      const group = groups[index]!;
      const limits = group.limitGroup!.tiers[key.tier]!;
      // By position, not group name: the id stays short whatever the catalog names its groups, and one
      // request's candidates (so its groups' order) are the same on every try.
      const groupRequestId = `${requestId}/rate/${index}`;
      try {
        await this.ledger.admit(
          {
            context: { requestId: groupRequestId, accountId: key.accountId, keyId: key.keyId },
            modelId: group.id,
            paid: false,
            tier: key.tier,
            limitGroup: group.model.limitGroup,
            requestsPerMinute: limits.minute,
            ...(limits.day !== undefined ? { requestsPerDay: limits.day } : {}),
          },
          { requestId, deadlineMs: 5_000 },
        );
      } catch (error) {
        await this.release({ requestId, key });
        throw error;
      }
      void this.release({ requestId: groupRequestId, key });
    }
  }

  async release({ requestId, key }: { requestId: string; key: VerifiedApiKey }): Promise<void> {
    try {
      await this.ledger.release({ context: { requestId, accountId: key.accountId, keyId: key.keyId } }, { requestId, deadlineMs: 5_000 });
    } catch (error) {
      // The ledger's sweeper releases it at the reservation deadline anyway.
      this.logger.warn({ err: error, request_id: requestId }, 'release of reservation failed; the sweeper will release it');
    }
  }

  settle(): void {
    // The usage event settles and closes the reservation in the ledger.
  }

  async stop(): Promise<void> {
    // Nothing held locally.
  }
}
