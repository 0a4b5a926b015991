import type { Request, Response } from 'express';
import { z } from 'zod';
import { formatCredits, GatewayError, GrpcStatus, parseCredits } from '@gateway/platform';
import type { Budget, BudgetAlert, LowBalanceThreshold } from '@gateway/proto';
import { auditActor } from '../account/audit-actor.js';
import { creditsPico, KEY_ID_MAX_LENGTH, parseWith } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { requestIdOf } from '../request-id.js';
import { accountFor, readAccountBody } from './account-routes.js';

/*
 * Budgets over HTTP (docs/governance.md): the provisioning key's owner sets, reads and removes the
 * account's budget and its keys' budgets. The ledger keeps them (and fires their thresholds in
 * settlement); a key's budget is set only after Auth confirms the key is this account's.
 */

const CALL_DEADLINE_MS = 5_000;
const BUDGET_BODY_MAX_BYTES = 4 * 1024;
/** The ledger's bound on a budget's limit. */
const BUDGET_LIMIT_MAX_PICO = parseCredits('1000000');
const DEFAULT_THRESHOLDS = [50, 80, 100];

const budgetLimit = z
  .union([z.number(), z.string()], { error: (issue) => (issue.input === undefined ? 'is required' : 'must be a number of credits') })
  .transform((value, context): string => {
    const pico = creditsPico(value, context);
    if (pico === undefined) return z.NEVER;
    if (pico <= 0n || pico > BUDGET_LIMIT_MAX_PICO) {
      context.addIssue({ code: 'custom', message: `must be greater than 0 and at most ${formatCredits(BUDGET_LIMIT_MAX_PICO)}` });
      return z.NEVER;
    }
    return formatCredits(pico);
  });

export const budgetBody = z.strictObject(
  {
    period: z.enum(['daily', 'weekly', 'monthly'], { error: (issue) => (issue.input === undefined ? 'is required' : 'must be daily, weekly or monthly') }),
    limit: budgetLimit,
    thresholds: z
      .array(z.number({ error: 'must be a whole percent' }).int({ error: 'must be a whole percent' }).min(1, { error: 'must be at least 1' }).max(100, { error: 'must be at most 100' }), { error: 'must be an array of percents' })
      .max(10, { error: 'must hold at most 10 thresholds' })
      .optional(),
    hard_stop: z.boolean({ error: 'must be a boolean' }).optional(),
  },
  { error: 'must be a JSON object' },
);

/** Whose budget or alert a record is: the account's own (no key id) or one key's. */
function scopeFields(keyId: string): { scope: 'account' | 'key'; key_id: string | null } {
  return keyId === '' ? { scope: 'account', key_id: null } : { scope: 'key', key_id: keyId };
}

function budgetRecord(budget: Budget) {
  return {
    object: 'budget',
    ...scopeFields(budget.keyId),
    period: budget.period,
    limit: budget.limit,
    thresholds: budget.thresholds,
    hard_stop: budget.hardStop,
    spent: budget.spent,
    period_start: budget.periodStart,
    fired_thresholds: budget.firedThresholds,
    updated_at: Number(budget.updatedAtMs / 1000n),
  };
}

function alertRecord(alert: BudgetAlert) {
  return {
    object: 'budget.alert',
    id: alert.eventId,
    ...scopeFields(alert.keyId),
    period: alert.period,
    period_start: alert.periodStart,
    threshold: alert.thresholdPercent,
    limit: alert.limit,
    spent: alert.spent,
    fired_at: Number(alert.firedAtMs / 1000n),
    delivery_state: alert.deliveryState,
  };
}

const options = (response: Response) => ({ requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });

/** The scope of the path: `account`, or a key of this account (a 404 for anyone else's or none). */
async function scopeKeyId(context: EdgeContext, request: Request, response: Response, accountId: string): Promise<string> {
  const keyId = (request.params as Record<string, string | undefined>).keyId;
  if (keyId === undefined) return '';
  if (keyId === '' || keyId.length > KEY_ID_MAX_LENGTH) throw edgeErrors.notFound('No such API key.');
  try {
    await context.auth.getApiKey({ accountId, keyId }, options(response));
  } catch (error) {
    if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) throw edgeErrors.notFound('No such API key.');
    throw error;
  }
  return keyId;
}

/** GET /v1/account/budgets: the account's budgets with this period's spend, and its latest fired alerts. */
export function listBudgetsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'budgets.read');
    const listed = await context.ledger.listBudgets({ accountId: account.accountId }, options(response));
    sendJson(response, 200, { object: 'list', data: listed.budgets.map(budgetRecord), alerts: listed.alerts.map(alertRecord) });
  };
}

/** PUT /v1/account/budgets/account and /v1/account/budgets/keys/{key_id}: creates or replaces the scope's budget. */
export function putBudgetHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'budgets.write');
    const body = parseWith(budgetBody, 'body', await readAccountBody(context, request, BUDGET_BODY_MAX_BYTES));
    const keyId = await scopeKeyId(context, request, response, account.accountId);
    const set = await context.ledger.setBudget(
      {
        accountId: account.accountId, keyId, period: body.period, limit: body.limit,
        thresholds: body.thresholds ?? DEFAULT_THRESHOLDS, hardStop: body.hard_stop ?? false,
      },
      { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) },
    );
    if (!set.budget) throw new Error('the ledger answered SetBudget without a budget');
    sendJson(response, 200, budgetRecord(set.budget));
  };
}

/** DELETE of the same paths: a 404 when the scope has no budget. */
export function deleteBudgetHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'budgets.write');
    const keyId = await scopeKeyId(context, request, response, account.accountId);
    try {
      await context.ledger.deleteBudget({ accountId: account.accountId, keyId }, { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) });
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) throw edgeErrors.notFound('No such budget.');
      throw error;
    }
    sendJson(response, 200, { deleted: true });
  };
}

/** The ledger's bound on a low-balance threshold. */
const LOW_BALANCE_MAX_PICO = parseCredits('1000000');

export const lowBalanceBody = z.strictObject(
  {
    threshold: z
      .union([z.number(), z.string()], { error: (issue) => (issue.input === undefined ? 'is required' : 'must be a number of credits') })
      .transform((value, context): string => {
        const pico = creditsPico(value, context);
        if (pico === undefined) return z.NEVER;
        if (pico < 0n || pico > LOW_BALANCE_MAX_PICO) {
          context.addIssue({ code: 'custom', message: `must be from 0 to ${formatCredits(LOW_BALANCE_MAX_PICO)}` });
          return z.NEVER;
        }
        return formatCredits(pico);
      }),
  },
  { error: 'must be a JSON object' },
);

function lowBalanceRecord(low: LowBalanceThreshold | undefined) {
  if (!low) throw new Error('the ledger answered without the low-balance threshold');
  return { object: 'low_balance_threshold', threshold: low.threshold === '' ? null : low.threshold, balance: low.balance, below: low.below };
}

/** GET /v1/account/budgets/low-balance: the account's low-balance threshold (null: none) and its balance against it. */
export function getLowBalanceHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'budgets.read');
    const got = await context.ledger.getLowBalanceThreshold({ accountId: account.accountId }, options(response));
    sendJson(response, 200, lowBalanceRecord(got.lowBalance));
  };
}

/** PUT (body `{ "threshold": "5" }`) and DELETE of the same path: set or clear it (the balance.low webhook event). */
export function setLowBalanceHandler(context: EdgeContext, clear: boolean) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'budgets.write');
    const threshold = clear ? '' : parseWith(lowBalanceBody, 'body', await readAccountBody(context, request, BUDGET_BODY_MAX_BYTES)).threshold;
    const set = await context.ledger.setLowBalanceThreshold(
      { accountId: account.accountId, threshold },
      { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) },
    );
    sendJson(response, 200, lowBalanceRecord(set.lowBalance));
  };
}
