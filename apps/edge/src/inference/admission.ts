import type { LedgerServiceClient, Usage } from '@gateway/proto';
import { formatCredits, type Logger, type PromiseClient } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import { MINIMUM_HOLD_PICO } from './request-bounds.js';

export interface AdmissionRequest {
  requestId: string;
  key: VerifiedApiKey;
  model: CatalogModel;
  /**
   * Pico-credits a paid request holds while it runs: max(0.05, its worst-case cost), from
   * inference/request-bounds.ts. Ignored for a free model.
   */
  holdPico: bigint;
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

  async admit({ requestId, key, model, holdPico }: AdmissionRequest): Promise<AdmissionTicket> {
    const limits = model.limitGroup?.tiers[key.tier];
    const response = await this.ledger.admit(
      {
        context: { requestId, accountId: key.accountId, keyId: key.keyId },
        modelId: model.id,
        paid: model.paid,
        tier: key.tier,
        limitGroup: model.model.limitGroup,
        ...(limits ? { requestsPerMinute: limits.minute } : {}),
        ...(limits?.day !== undefined ? { requestsPerDay: limits.day } : {}),
        ...(key.creditLimit !== undefined ? { keyCreditLimit: key.creditLimit } : {}),
        ...(key.creditLimit !== undefined && key.limitReset ? { keyLimitReset: key.limitReset } : {}),
        ...(model.paid && holdPico > MINIMUM_HOLD_PICO ? { reserveCredits: formatCredits(holdPico) } : {}),
      },
      { requestId, deadlineMs: 5_000 },
    );
    return { reservedCredits: response.reservedCredits };
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
