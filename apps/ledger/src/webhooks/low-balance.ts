import { auditCallContext, errors, formatCredits, MoneyFormatError, parseCredits, unary, UNATTRIBUTED_AUDIT, type AuditCallContext, type Logger } from '@gateway/platform';
import { appendAudit, auditedTransaction, sql } from '@gateway/platform/db';
import type {
  GetLowBalanceThresholdRequest, GetLowBalanceThresholdResponse, LedgerServiceServer, LowBalanceThreshold as LowBalanceMessage,
  SetLowBalanceThresholdRequest, SetLowBalanceThresholdResponse,
} from '@gateway/proto';
import type { LedgerDatabase } from '../ledger-db.js';

/*
 * An account's low-balance threshold: the `balance.low` webhook event (docs/governance.md "Webhooks").
 * The threshold is a column of the account's balances row; the crossing is decided by a row trigger on
 * that row (migration 0023), in the transaction whose charge takes the balance below it. This module
 * only sets, clears and reads it, each change with its audit entry in the same transaction.
 */

/** The highest threshold: the ledger's largest single top-up. */
export const MAX_LOW_BALANCE_PICO = parseCredits('1000000');
const AUDIT_CHAIN = 'ledger';
const MAX_IDENTIFIER_LENGTH = 200;

/** The LedgerService methods of the low-balance threshold. */
export type LowBalanceMethods = 'setLowBalanceThreshold' | 'getLowBalanceThreshold';

export interface LowBalance {
  accountId: string;
  thresholdPico: bigint | null;
  balancePico: bigint;
}

/** A threshold as the API takes it: a decimal of credits, 0..MAX_LOW_BALANCE_PICO, at most 12 decimals. */
export function parseLowBalanceThreshold(text: string): bigint {
  let pico: bigint;
  try {
    pico = parseCredits(text);
  } catch (error) {
    if (error instanceof MoneyFormatError) throw errors.invalidRequest('threshold must be a decimal number of credits with at most 12 decimals', 'threshold');
    throw error;
  }
  if (pico < 0n || pico > MAX_LOW_BALANCE_PICO) throw errors.invalidRequest(`threshold must be from 0 to ${formatCredits(MAX_LOW_BALANCE_PICO)}`, 'threshold');
  return pico;
}

type Row = { balance_pico: bigint; low_balance_threshold_pico: bigint | null };
const toLowBalance = (accountId: string, row: Row | undefined): LowBalance => ({
  accountId,
  thresholdPico: row?.low_balance_threshold_pico == null ? null : BigInt(row.low_balance_threshold_pico),
  balancePico: BigInt(row?.balance_pico ?? 0n),
});
const audited = (thresholdPico: bigint | null) => ({ low_balance_threshold: thresholdPico === null ? null : formatCredits(thresholdPico) });

/**
 * Sets (or with null clears) the account's threshold. Setting it makes the account's balances row when
 * it has none (balance 0, as an account without one reads). A change of the threshold fires nothing:
 * only a change of the balance crosses it.
 */
export async function setLowBalanceThreshold(
  db: LedgerDatabase, accountId: string, thresholdPico: bigint | null, audit: AuditCallContext = UNATTRIBUTED_AUDIT,
): Promise<LowBalance> {
  return auditedTransaction(db, async (trx) => {
    const before = (await sql<Row>`
      select balance_pico, low_balance_threshold_pico from balances where account_id = ${accountId} for update`.execute(trx)).rows[0];
    const beforePico = toLowBalance(accountId, before).thresholdPico;
    if (beforePico === thresholdPico) return toLowBalance(accountId, before);
    const row = thresholdPico === null
      ? (await sql<Row>`
          update balances set low_balance_threshold_pico = null where account_id = ${accountId}
          returning balance_pico, low_balance_threshold_pico`.execute(trx)).rows[0]
      : (await sql<Row>`
          insert into balances (account_id, balance_pico, low_balance_threshold_pico) values (${accountId}, 0, ${thresholdPico})
          on conflict (account_id) do update set low_balance_threshold_pico = excluded.low_balance_threshold_pico
          returning balance_pico, low_balance_threshold_pico`.execute(trx)).rows[0];
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId, action: thresholdPico === null ? 'low_balance.clear' : 'low_balance.set',
      targetType: 'account', targetId: accountId, before: audited(beforePico), after: audited(thresholdPico),
    });
    return toLowBalance(accountId, row);
  });
}

export async function getLowBalance(db: LedgerDatabase, accountId: string): Promise<LowBalance> {
  const row = (await sql<Row>`select balance_pico, low_balance_threshold_pico from balances where account_id = ${accountId}`.execute(db)).rows[0];
  return toLowBalance(accountId, row);
}

const answer = (low: LowBalance): LowBalanceMessage => ({
  accountId: low.accountId,
  threshold: low.thresholdPico === null ? '' : formatCredits(low.thresholdPico),
  balance: formatCredits(low.balancePico),
  below: low.thresholdPico !== null && low.balancePico < low.thresholdPico,
});

function requireAccount(value: string): string {
  if (!value) throw errors.invalidRequest('account_id is required', 'account_id');
  if (value.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`account_id is longer than ${MAX_IDENTIFIER_LENGTH} characters`, 'account_id');
  return value;
}

export function lowBalanceServiceImplementation(db: LedgerDatabase, logger: Logger): Pick<LedgerServiceServer, LowBalanceMethods> {
  return {
    setLowBalanceThreshold: unary(logger, 'SetLowBalanceThreshold', async (request: SetLowBalanceThresholdRequest, call): Promise<SetLowBalanceThresholdResponse> => {
      const accountId = requireAccount(request.accountId);
      const thresholdPico = request.threshold === '' ? null : parseLowBalanceThreshold(request.threshold);
      return { lowBalance: answer(await setLowBalanceThreshold(db, accountId, thresholdPico, auditCallContext(call.metadata))) };
    }),
    getLowBalanceThreshold: unary(logger, 'GetLowBalanceThreshold', async (request: GetLowBalanceThresholdRequest): Promise<GetLowBalanceThresholdResponse> => {
      return { lowBalance: answer(await getLowBalance(db, requireAccount(request.accountId))) };
    }),
  };
}
