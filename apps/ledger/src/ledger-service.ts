import { auditCallContext, errors, formatCredits, GatewayError, GrpcStatus, MoneyFormatError, newId, parseCredits, unary, type Logger } from '@gateway/platform';
import {
  ErrorReason,
  type AcquireLeaseRequest, type AcquireLeaseResponse, type ReturnLeaseRequest, type ReturnLeaseResponse, type RenewLeasesRequest, type RenewLeasesResponse,
  type AdmitRequest, type AdmitResponse, type AccountBalance, type GetActivityRequest, type GetActivityResponse, type GetGenerationRequest, type GetGenerationResponse, type GetBalanceRequest,
  type GetBalanceResponse, type GetBalancesRequest, type GetBalancesResponse, type GetModelLatencyRequest, type GetModelLatencyResponse,
  type ListGenerationsRequest, type ListGenerationsResponse, type GetKeyUsageRequest, type GetKeyUsageResponse, type LedgerServiceServer, type ReleaseRequest,
  type ReleaseResponse, type TopUpRequest, type TopUpResponse, type VerifyJournalRequest, type VerifyJournalResponse,
  type SetBudgetRequest, type SetBudgetResponse, type DeleteBudgetRequest, type DeleteBudgetResponse, type ListBudgetsRequest, type ListBudgetsResponse, type Budget as BudgetMessage,
  VoidOutcome, type VoidChargeRequest, type VoidChargeResponse, type SettleUsageRequest, type SettleUsageResponse,
} from '@gateway/proto';
import { DEFAULT_LEASE_DRAIN_MS, DEFAULT_LEASE_LIFETIME_MS, MAX_KEY_IDS, MAX_RENEWED_LEASES, RESERVE_PICO, usageFromColumns, type Ledger, type VoidResult } from './ledger.js';

const VOID_OUTCOMES: Record<VoidResult, VoidOutcome> = {
  voided: VoidOutcome.VOID_OUTCOME_VOIDED,
  refunded: VoidOutcome.VOID_OUTCOME_REFUNDED,
  already_void: VoidOutcome.VOID_OUTCOME_ALREADY_VOID,
  not_owned: VoidOutcome.VOID_OUTCOME_NOT_OWNED,
};
import type { LedgerMetrics } from './ledger-metrics.js';
import type { WebhookMethods } from './webhooks/webhook-service.js';
import type { LowBalanceMethods } from './webhooks/low-balance.js';
import { parseLimitReset } from './key-windows.js';
import { budgetRefusal, parsePeriod, parseThresholds, type BudgetRefusal, type BudgetStatus } from './budgets.js';
import { prepareEvents, sharedPricingCache, type Rejected } from './settlement-consumer.js';
import { dedupeByRequest, type SettlementItem } from './settlement-batch.js';

/** One lease holds at most this much: a replica never sits on a large balance it cannot use soon. */
export const MAX_LEASE_PICO = parseCredits('1000');

/** A single top-up above this is an operator typo, not a payment. */
export const MAX_TOP_UP_PICO = parseCredits('1000000');
/** Longest identifier (account, key, lease, holder, limit group) and top-up note a call may carry. */
const MAX_IDENTIFIER_LENGTH = 200, MAX_NOTE_LENGTH = 1_000;
/** Most days the activity and the latency reports cover. */
const MAX_ACTIVITY_DAYS = 30, MAX_LATENCY_DAYS = 30;
const MAX_BALANCE_IDS = 100;
/** Generations listed per page: at most, and when the caller names no limit. */
const MAX_GENERATION_PAGE = 100, DEFAULT_GENERATION_PAGE = 20;
/** Most events one SettleUsage call takes (an edge hands over the streams one broken router call held). */
const MAX_SETTLE_EVENTS = 1_000;

/** GetBalance's and GetBalances' decimal answer: available is what is not held by open reservations and leases. */
function balanceAnswer(balancePico: bigint, reservedPico: bigint): Omit<AccountBalance, 'accountId'> {
  return { balance: formatCredits(balancePico), available: formatCredits(balancePico - reservedPico), reserved: formatCredits(reservedPico) };
}

function requireIdentifier(value: string, param: string): string {
  if (!value) throw errors.invalidRequest(`${param} is required`, param);
  if (value.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`${param} is longer than ${MAX_IDENTIFIER_LENGTH} characters`, param);
  return value;
}

function parseAmount(text: string, param: string): bigint {
  try {
    return parseCredits(text);
  } catch (error) {
    if (error instanceof MoneyFormatError) throw errors.invalidRequest(`${param} must be a decimal number of credits with at most 12 decimals`, param);
    throw error;
  }
}

/**
 * The key credit limit an Admit or an AcquireLease carries, in pico (null: the request has none). Never
 * negative, and only with the key it bounds: `keyIdParam` names where that request carries the key.
 */
function keyCreditLimitOf(limit: string | undefined, keyId: string, keyIdParam: string): bigint | null {
  if (limit === undefined) return null;
  const limitPico = parseAmount(limit, 'key_credit_limit');
  if (limitPico < 0n) throw errors.invalidRequest('key_credit_limit must not be negative', 'key_credit_limit');
  if (!keyId) throw errors.invalidRequest(`key_credit_limit needs ${keyIdParam}`, keyIdParam);
  return limitPico;
}

export interface LeaseServiceOptions {
  /** Broadcasts a LeaseRecall (called after the refusing transaction; best effort). */
  recall?: (accountId: string, keyId: string) => void;
  /** How long a lease returned with spent_credits stays open for its charges. Default DEFAULT_LEASE_DRAIN_MS. */
  leaseDrainMs?: number;
  /**
   * A lease's deadline after its grant or last renewal (default DEFAULT_LEASE_LIFETIME_MS). Its holder
   * admits on it for the lifetime less leaseDrainMs (renew_within_ms); must exceed leaseDrainMs by 1 s.
   */
  leaseLifetimeMs?: number;
  /** Counts refusals (gateway_ledger_refusals_total). */
  metrics?: LedgerMetrics;
}

/** gRPC adapter: validates and translates; the rules live in Ledger and the admit SQL function. */
export function ledgerServiceImplementation(ledger: Ledger, logger: Logger, leaseOptions: LeaseServiceOptions = {}): Omit<LedgerServiceServer, WebhookMethods | LowBalanceMethods> {
  const recall = leaseOptions.recall ?? (() => undefined);
  const drainMs = leaseOptions.leaseDrainMs ?? DEFAULT_LEASE_DRAIN_MS;
  const leaseLifetimeMs = leaseOptions.leaseLifetimeMs ?? DEFAULT_LEASE_LIFETIME_MS;
  // The holder stops admitting a drain time before the ledger may close the lease: what it admitted last
  // has that long to end and settle (both measured from instants the holder's call precedes).
  const renewWithinMs = leaseLifetimeMs - drainMs;
  if (!Number.isInteger(leaseLifetimeMs) || renewWithinMs < 1_000) {
    throw new Error(`leaseLifetimeMs must be an integer at least 1 s above leaseDrainMs (${drainMs}): ${leaseLifetimeMs}`);
  }
  return {
    admit: unary(logger, 'Admit', async (request: AdmitRequest): Promise<AdmitResponse> => {
      const requestId = requireIdentifier(request.context?.requestId ?? '', 'context.request_id');
      const accountId = requireIdentifier(request.context?.accountId ?? '', 'context.account_id');
      const keyId = request.context?.keyId ?? '';
      const keyLimitPico = keyCreditLimitOf(request.keyCreditLimit, keyId, 'context.key_id');
      const keyLimitReset = parseLimitReset(request.keyLimitReset);
      if (request.limitGroup.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`limit_group is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'limit_group');
      const outcome = await ledger.admit({
        requestId, accountId, keyId, amountPico: request.paid ? holdAmount(request.reserveCredits, 'reserve_credits', MAX_LEASE_PICO) : 0n, keyLimitPico,
        limitGroup: request.limitGroup,
        requestsPerMinute: request.requestsPerMinute ?? null,
        requestsPerDay: request.requestsPerDay ?? null,
        keyLimitReset,
      });
      switch (outcome.kind) {
        case 'admitted':
          return {
            reservedCredits: formatCredits(outcome.amountPico),
            reservationExpiresAtMs: outcome.expiresAt ? BigInt(outcome.expiresAt.getTime()) : 0n,
          };
        default:
          leaseOptions.metrics?.refused('admit', outcome.kind);
          throw refusal(outcome);
      }
    }),

    acquireLease: unary(logger, 'AcquireLease', async (request: AcquireLeaseRequest): Promise<AcquireLeaseResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const keyId = request.keyId;
      if (keyId.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`key_id is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'key_id');
      if (request.holder.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`holder is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'holder');
      if (request.limitGroup.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`limit_group is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'limit_group');
      const requestedPico = parseAmount(request.requestedCredits, 'requested_credits');
      if (requestedPico < RESERVE_PICO || requestedPico > MAX_LEASE_PICO) {
        throw errors.invalidRequest(`requested_credits must be between ${formatCredits(RESERVE_PICO)} and ${formatCredits(MAX_LEASE_PICO)}`, 'requested_credits');
      }
      const minimumPico = holdAmount(request.minimumCredits, 'minimum_credits', requestedPico);
      const keyLimitPico = keyCreditLimitOf(request.keyCreditLimit, keyId, 'key_id');
      const keyLimitReset = parseLimitReset(request.keyLimitReset);
      const outcome = await ledger.acquireLease({
        leaseId: newId('lease'), accountId, keyId, holder: request.holder, requestedPico, minimumPico, keyLimitPico,
        limitGroup: request.limitGroup,
        requestsPerMinute: request.requestsPerMinute ?? null,
        requestsPerDay: request.requestsPerDay ?? null,
        requestedRequests: request.requestedRequests,
        lifetimeMs: leaseLifetimeMs,
        recallIfHeld: request.recallIfHeld,
        keyLimitReset,
      });
      switch (outcome.kind) {
        case 'recalling':
          recall(accountId, outcome.keyId);
          return { leaseId: '', grantedCredits: '0', expiresAtMs: 0n, grantedRequests: 0, requestsValidUntilMs: 0n, recalling: true, renewWithinMs: 0, moreAvailable: false };
        case 'granted':
          return {
            leaseId: outcome.leaseId,
            grantedCredits: formatCredits(outcome.grantedPico),
            expiresAtMs: BigInt(outcome.expiresAt.getTime()),
            grantedRequests: outcome.grantedRequests,
            requestsValidUntilMs: outcome.requestsValidUntil ? BigInt(outcome.requestsValidUntil.getTime()) : 0n,
            recalling: false,
            renewWithinMs,
            moreAvailable: outcome.moreAvailable,
          };
        default:
          leaseOptions.metrics?.refused('lease', outcome.kind);
          throw refusal(outcome);
      }
    }),

    returnLease: unary(logger, 'ReturnLease', async (request: ReturnLeaseRequest): Promise<ReturnLeaseResponse> => {
      if (!request.leaseId || request.leaseId.length > MAX_IDENTIFIER_LENGTH) return { returned: false, returnedCredits: '0' };
      const spentPico = request.spentCredits === undefined ? null : parseAmount(request.spentCredits, 'spent_credits');
      const returned = await ledger.returnLease(request.leaseId, request.unusedRequests, spentPico, leaseOptions.leaseDrainMs);
      return { returned: returned !== null, returnedCredits: formatCredits(returned ?? 0n) };
    }),

    renewLeases: unary(logger, 'RenewLeases', async (request: RenewLeasesRequest): Promise<RenewLeasesResponse> => {
      const holder = requireIdentifier(request.holder, 'holder');
      if (request.leaseIds.length > MAX_RENEWED_LEASES) throw errors.invalidRequest(`lease_ids names more than ${MAX_RENEWED_LEASES} leases`, 'lease_ids');
      if (request.leaseIds.some((id) => id.length > MAX_IDENTIFIER_LENGTH)) throw errors.invalidRequest(`a lease id is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'lease_ids');
      const renewed = await ledger.renewLeases(holder, request.leaseIds, leaseLifetimeMs);
      return { lostLeaseIds: request.leaseIds.filter((id) => !renewed.has(id)), renewWithinMs };
    }),

    release: unary(logger, 'Release', async (request: ReleaseRequest): Promise<ReleaseResponse> => {
      const requestId = request.context?.requestId ?? '';
      if (!requestId) return { released: false };
      return { released: await ledger.release(requestId, request.context?.accountId ?? '') };
    }),

    voidCharge: unary(logger, 'VoidCharge', async (request: VoidChargeRequest): Promise<VoidChargeResponse> => {
      const requestId = requireIdentifier(request.context?.requestId ?? '', 'context.request_id');
      const accountId = requireIdentifier(request.context?.accountId ?? '', 'context.account_id');
      const { outcome, refundedPico } = await ledger.voidCharge(requestId, accountId, request.context?.keyId ?? '');
      return { outcome: VOID_OUTCOMES[outcome], refundedCredits: formatCredits(refundedPico) };
    }),

    settleUsage: unary(logger, 'SettleUsage', async (request: SettleUsageRequest): Promise<SettleUsageResponse> => {
      if (request.events.length > MAX_SETTLE_EVENTS) throw errors.invalidRequest(`events holds more than ${MAX_SETTLE_EVENTS} events`, 'events');
      const startedAt = performance.now();
      const items: SettlementItem[] = [];
      const rejected: Rejected[] = [];
      prepareEvents(request.events, 'edge-settlement', logger, sharedPricingCache, items, rejected);
      if (rejected.length > 0) {
        logger.error({ rejected: rejected.map(({ requestId, reason }) => ({ requestId, reason })) }, 'usage events handed over by an edge rejected; kept in ledger.rejected_events');
        await ledger.recordRejected(rejected);
        throw errors.invalidRequest(`${rejected.length} of the events can never settle: ${rejected[0]!.reason}`, 'events');
      }
      const result = await ledger.settle(items);
      leaseOptions.metrics?.settled(result, 0, (performance.now() - startedAt) / 1000, dedupeByRequest(items).filter((item) => item.served));
      logger.info({ events: items.length, charged: result.charged, duplicates: result.duplicates }, 'usage events handed over by an edge settled');
      return { charged: result.charged, duplicates: result.duplicates };
    }),

    topUp: unary(logger, 'TopUp', async (request: TopUpRequest, call): Promise<TopUpResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const idempotencyKey = requireIdentifier(request.idempotencyKey, 'idempotency_key');
      const amountPico = parseAmount(request.credits, 'credits');
      if (amountPico <= 0n) throw errors.invalidRequest('credits must be greater than 0', 'credits');
      if (amountPico > MAX_TOP_UP_PICO) throw errors.invalidRequest(`credits must be at most ${formatCredits(MAX_TOP_UP_PICO)} per top-up`, 'credits');
      if (request.note.length > MAX_NOTE_LENGTH) throw errors.invalidRequest(`note is longer than ${MAX_NOTE_LENGTH} characters`, 'note');
      // TopUp is admin-only (internal-auth.ts): an unclaimed caller is recorded as the admin token.
      const result = await ledger.topUp({ accountId, amountPico, idempotencyKey, note: request.note }, auditCallContext(call.metadata, 'admin'));
      if ('conflict' in result) {
        throw errors.conflict(`idempotency_key ${idempotencyKey} was already used for a different top-up`);
      }
      return { balance: formatCredits(result.balancePico) };
    }),

    setBudget: unary(logger, 'SetBudget', async (request: SetBudgetRequest, call): Promise<SetBudgetResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      if (request.keyId.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`key_id is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'key_id');
      const period = parsePeriod(request.period);
      const limitPico = parseAmount(request.limit, 'limit');
      const thresholds = parseThresholds(request.thresholds);
      const budget = await ledger.setBudget({ accountId, keyId: request.keyId, period, limitPico, thresholds, hardStop: request.hardStop }, auditCallContext(call.metadata));
      // Leases granted before this budget hold capacity it did not bound: their holders give them back.
      recall(accountId, request.keyId);
      const status = (await ledger.listBudgets(accountId)).find((entry) => entry.keyId === budget.keyId);
      return { budget: budgetAnswer(status ?? { ...budget, spentPico: 0n, periodStart: '', firedThresholds: [] }) };
    }),

    deleteBudget: unary(logger, 'DeleteBudget', async (request: DeleteBudgetRequest, call): Promise<DeleteBudgetResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      if (request.keyId.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`key_id is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'key_id');
      if (!(await ledger.deleteBudget(accountId, request.keyId, auditCallContext(call.metadata)))) throw errors.notFound('No such budget.');
      return { deleted: true };
    }),

    listBudgets: unary(logger, 'ListBudgets', async (request: ListBudgetsRequest): Promise<ListBudgetsResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const [budgets, alerts] = await Promise.all([ledger.listBudgets(accountId), ledger.listBudgetAlerts(accountId)]);
      return {
        budgets: budgets.map(budgetAnswer),
        alerts: alerts.map((alert) => ({
          eventId: alert.eventId, keyId: alert.keyId, period: alert.period, periodStart: alert.periodStart, thresholdPercent: alert.thresholdPercent,
          limit: formatCredits(alert.limitPico), spent: formatCredits(alert.spentPico), firedAtMs: BigInt(alert.firedAt.getTime()), deliveryState: alert.deliveryState,
        })),
      };
    }),

    listLedgerAuditEntries: unary(logger, 'ListLedgerAuditEntries', (request) => ledger.listAuditEntries(request)),
    readLedgerAuditChain: unary(logger, 'ReadLedgerAuditChain', (request) => ledger.readAuditChain(request)),

    getBalance: unary(logger, 'GetBalance', async (request: GetBalanceRequest): Promise<GetBalanceResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const { balancePico, reservedPico } = await ledger.balance(accountId);
      return balanceAnswer(balancePico, reservedPico);
    }),

    getBalances: unary(logger, 'GetBalances', async (request: GetBalancesRequest): Promise<GetBalancesResponse> => {
      if (request.accountIds.length > MAX_BALANCE_IDS) throw errors.invalidRequest(`at most ${MAX_BALANCE_IDS} account_ids per call`, 'account_ids');
      const accountIds = request.accountIds.map((accountId) => requireIdentifier(accountId, 'account_ids'));
      const balances = await ledger.balances(accountIds);
      return { balances: balances.map((entry) => ({ accountId: entry.accountId, ...balanceAnswer(entry.balancePico, entry.reservedPico) })) };
    }),

    getKeyUsage: unary(logger, 'GetKeyUsage', async (request: GetKeyUsageRequest): Promise<GetKeyUsageResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      if (request.keyIds.length > MAX_KEY_IDS) throw errors.invalidRequest(`at most ${MAX_KEY_IDS} key_ids per call`, 'key_ids');
      const usage = await ledger.keyUsage(accountId, request.keyIds);
      return {
        usage: usage.map((entry) => ({
          keyId: entry.keyId, credits: formatCredits(entry.spentPico), creditsDaily: formatCredits(entry.dailyPico),
          creditsWeekly: formatCredits(entry.weeklyPico), creditsMonthly: formatCredits(entry.monthlyPico),
        })),
      };
    }),

    getActivity: unary(logger, 'GetActivity', async (request: GetActivityRequest): Promise<GetActivityResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      if (!Number.isInteger(request.days) || request.days < 1 || request.days > MAX_ACTIVITY_DAYS) {
        throw errors.invalidRequest(`days must be between 1 and ${MAX_ACTIVITY_DAYS}`, 'days');
      }
      const records = await ledger.activity(accountId, request.days, request.keyId);
      return {
        rows: records.map((record) => ({
          date: record.date,
          modelId: record.modelId,
          keyId: record.keyId,
          requests: record.requests,
          usage: usageFromColumns(record.usage, record.estimated),
          credits: formatCredits(record.costPico),
        })),
      };
    }),

    getGeneration: unary(logger, 'GetGeneration', async (request: GetGenerationRequest): Promise<GetGenerationResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const requestId = requireIdentifier(request.requestId, 'request_id');
      return ledger.generation(accountId, requestId);
    }),

    listGenerations: unary(logger, 'ListGenerations', async (request: ListGenerationsRequest): Promise<ListGenerationsResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      if (request.limit > MAX_GENERATION_PAGE) throw errors.invalidRequest(`limit must be between 1 and ${MAX_GENERATION_PAGE}`, 'limit');
      if (request.keyId.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`key_id is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'key_id');
      return ledger.listGenerations(accountId, { limit: request.limit || DEFAULT_GENERATION_PAGE, cursor: request.cursor, keyId: request.keyId });
    }),

    getModelLatency: unary(logger, 'GetModelLatency', async (request: GetModelLatencyRequest): Promise<GetModelLatencyResponse> => {
      if (!Number.isInteger(request.days) || request.days < 1 || request.days > MAX_LATENCY_DAYS) {
        throw errors.invalidRequest(`days must be between 1 and ${MAX_LATENCY_DAYS}`, 'days');
      }
      return { models: await ledger.modelLatency(request.days) };
    }),

    verifyJournal: unary(logger, 'VerifyJournal', async (request: VerifyJournalRequest): Promise<VerifyJournalResponse> => {
      const report = await ledger.verify(request.accountId);
      for (const mismatch of report.reservedMismatches) {
        // The proto reports balance mismatches only; a reserved-sum drift is still worth an operator's eye.
        logger.error({ account_id: mismatch.accountId, stored: String(mismatch.storedPico), open: String(mismatch.openPico) }, 'reserved credits differ from open reservations');
      }
      return {
        accountsChecked: report.accountsChecked,
        mismatches: report.balanceMismatches.map((mismatch) => ({
          accountId: mismatch.accountId,
          storedBalance: formatCredits(mismatch.storedPico),
          journalBalance: formatCredits(mismatch.journalPico),
        })),
      };
    }),
  };
}

function budgetAnswer(budget: BudgetStatus): BudgetMessage {
  return {
    accountId: budget.accountId, keyId: budget.keyId, period: budget.period, limit: formatCredits(budget.limitPico), thresholds: budget.thresholds,
    hardStop: budget.hardStop, spent: formatCredits(budget.spentPico), periodStart: budget.periodStart, firedThresholds: budget.firedThresholds,
    updatedAtMs: BigInt(budget.updatedAt.getTime()),
  };
}

type Refusal =
  | { kind: 'rate_limited'; retryAfterSeconds: number }
  | { kind: 'insufficient'; amountPico: bigint; availablePico: bigint }
  | { kind: 'key_limit'; amountPico: bigint; keyUsedPico: bigint; keyLimitPico: bigint }
  | BudgetRefusal;

/** The typed error for a refused admission or lease, the same words either way. */
/**
 * What a paid request holds (or the least grant a lease must make): the caller's decimal, at least the
 * 0.05 reservation of spec §8 and at most `maxPico`.
 */
function holdAmount(text: string | undefined, field: string, maxPico: bigint): bigint {
  if (text === undefined || text === '') return RESERVE_PICO;
  const pico = parseAmount(text, field);
  if (pico > maxPico) throw errors.invalidRequest(`${field} must be at most ${formatCredits(maxPico)}`, field);
  return pico < RESERVE_PICO ? RESERVE_PICO : pico;
}

function refusal(outcome: Refusal): GatewayError {
  switch (outcome.kind) {
    case 'rate_limited':
      return new GatewayError(
        GrpcStatus.RESOURCE_EXHAUSTED,
        ErrorReason.ERROR_REASON_RATE_LIMITED,
        `Rate limit reached. Please try again in ${outcome.retryAfterSeconds}s.`,
        { retryAfterSeconds: outcome.retryAfterSeconds },
      );
    case 'insufficient':
      return new GatewayError(
        GrpcStatus.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA,
        `Insufficient credits: a paid request needs ${formatCredits(outcome.amountPico)} credits available; ` +
          `the account has ${formatCredits(outcome.availablePico)} available. Add credits to continue.`,
        { code: 'insufficient_quota' },
      );
    case 'key_limit':
      return new GatewayError(
        GrpcStatus.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED,
        `Key credit limit reached: this key has used or holds ${formatCredits(outcome.keyUsedPico)} of its ` +
          `${formatCredits(outcome.keyLimitPico)} credit limit, and this request needs ${formatCredits(outcome.amountPico)} more.`,
        { code: 'key_limit_exceeded' },
      );
    case 'budget':
      return budgetRefusal(outcome);
  }
}
