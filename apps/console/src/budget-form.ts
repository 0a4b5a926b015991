import { fromUnits, toUnits } from './decimal.js';

/** The ledger's bounds on a budget (docs/governance.md "Budgets"): checked here to say so before a round trip. */
export const BUDGET_LIMIT_MAX = '1000000';
export const MAX_THRESHOLDS = 10;
export const DEFAULT_THRESHOLDS = [50, 80, 100];
const CREDITS = /^\d+(\.\d{1,12})?$/;

/**
 * The thresholds field ("50, 80, 100") as whole percents, ascending and without repeats, or what is wrong
 * with it in words. An empty field means no thresholds.
 */
export function parseThresholds(text: string): { thresholds: number[] } | { problem: string } {
  const parts = text.split(/[\s,]+/).filter((part) => part !== '');
  const seen = new Set<number>();
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part) || Number(part) < 1 || Number(part) > 100) {
      return { problem: `Thresholds are whole percents from 1 to 100, separated by commas; "${part}" is not one.` };
    }
    seen.add(Number(part));
  }
  if (seen.size > MAX_THRESHOLDS) return { problem: `At most ${MAX_THRESHOLDS} thresholds.` };
  return { thresholds: [...seen].sort((a, b) => a - b) };
}

/** The limit field as the decimal the API takes, or what is wrong with it in words. */
export function parseLimit(text: string): { limit: string } | { problem: string } {
  const trimmed = text.trim();
  if (!CREDITS.test(trimmed) || toUnits(trimmed) <= 0n || toUnits(trimmed) > toUnits(BUDGET_LIMIT_MAX)) {
    return { problem: `The limit is an amount of credits above 0 and at most ${BUDGET_LIMIT_MAX}, with at most 12 decimals.` };
  }
  return { limit: fromUnits(toUnits(trimmed)) };
}

/** Spent as a share of the limit, in whole percents rounded down ("84 %"), computed on exact decimals. */
export function spentPercent(spent: string, limit: string): string {
  const limitUnits = toUnits(limit);
  if (limitUnits <= 0n) return '—';
  return `${(toUnits(spent) * 100n) / limitUnits} %`;
}
