import { formatCredits, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import type {
  ApiKey, AuthServiceClient, CatalogServiceClient, LedgerServiceClient, Model, RequestContext, RouterServiceClient,
} from '@gateway/proto';
import { runFailure } from './run-failure.js';

/**
 * The steps a run of lower-priority work takes before its Router call, the same for a batch line and a
 * background response (docs/jobs.md "How a batch runs"): void the charges of the earlier attempts, read
 * the key that created the work as it is now, and be admitted by the ledger for the work's hold.
 */

/** The services a runner calls. */
export interface RunClients {
  auth: PromiseClient<AuthServiceClient>;
  catalog: PromiseClient<CatalogServiceClient>;
  ledger: PromiseClient<LedgerServiceClient>;
  router: PromiseClient<RouterServiceClient>;
}

/** Bound of one call to the auth, catalog or ledger service. */
export const CALL_DEADLINE_MS = 10_000;

/** A failure worth another attempt: the work goes back to waiting with its lease lapsing soon. */
export class TransientRunFailure extends Error {}

/** Whose work it is: the account and the key that created it. */
export interface RunOwner {
  accountId: string;
  keyId: string;
}

/**
 * Voids the charges of attempts 1 … attempts-1 (idempotent; an attempt that never charged is marked
 * void): only the attempt whose answer is recorded may stay charged, since the earlier ones' answers
 * reached nobody. The work does not run until they are void: two charges never stand for one piece of work.
 */
export async function voidEarlierAttempts(ledger: RunClients['ledger'], owner: RunOwner, attempts: number, attemptId: (attempt: number) => string): Promise<void> {
  if (attempts <= 1) return;
  await Promise.all(Array.from({ length: attempts - 1 }, (_, index) => {
    const requestId = attemptId(index + 1);
    return ledger.voidCharge({ context: { requestId, accountId: owner.accountId, keyId: owner.keyId } }, { requestId, deadlineMs: CALL_DEADLINE_MS });
  })).catch((error: unknown) => {
    throw new TransientRunFailure('voiding earlier attempts failed', { cause: error });
  });
}

/**
 * The key that created the work, as it is now; undefined when it was deleted, is disabled or has
 * expired since (the work stops). Auth unreachable: a transient failure.
 */
export async function currentKey(auth: RunClients['auth'], owner: RunOwner, requestId: string): Promise<ApiKey | undefined> {
  const key = await auth.getApiKey({ accountId: owner.accountId, keyId: owner.keyId }, { requestId, deadlineMs: CALL_DEADLINE_MS }).then(
    (answer) => answer.key,
    (error: unknown) => {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
      throw new TransientRunFailure('auth unreachable', { cause: error });
    },
  );
  if (!key || key.disabled || (key.expiresAtMs !== undefined && Number(key.expiresAtMs) <= Date.now())) return undefined;
  return key;
}

export interface Admission {
  context: RequestContext;
  model: Model;
  tier: string;
  key: ApiKey;
  /** What the work holds (0 for a free model). */
  holdPico: bigint;
}

/**
 * Ledger.Admit of the work's hold. Lower-priority work is paced by the runners' concurrency, not by the
 * interactive rate windows (none are sent). A transient refusal (see run-failure.ts) throws a
 * TransientRunFailure; any other (a 402 for money, …) is thrown as it is, for the runner to record.
 */
export async function admit(ledger: RunClients['ledger'], admission: Admission): Promise<void> {
  const { context, model, key, holdPico } = admission;
  const paid = holdPico > 0n;
  try {
    await ledger.admit({
      context,
      modelId: model.id,
      paid,
      tier: admission.tier,
      limitGroup: model.limitGroup,
      requestsPerMinute: undefined,
      requestsPerDay: undefined,
      keyCreditLimit: key.creditLimit,
      keyLimitReset: key.limitReset,
      reserveCredits: paid ? formatCredits(holdPico) : undefined,
    }, { requestId: context.requestId, deadlineMs: CALL_DEADLINE_MS });
  } catch (error) {
    if (runFailure(error).transient) throw new TransientRunFailure('admission failed', { cause: error });
    throw error;
  }
}
