import { Decimal as DefaultDecimal } from 'decimal.js';

/**
 * Money never touches a JS float. Amounts travel as decimal strings and are computed as integer
 * pico-credits (1 credit = 10^12 pico-credits, fixed scale). A price with more than 12 decimals
 * cannot be represented and is refused where it enters (catalog load, top-up).
 */
export const PICO_PER_CREDIT = 1_000_000_000_000n;
const SCALE = 12;
// decimal.js rounds to 20 significant digits by default; amounts here may need 12 decimals on top of
// up to 26 integer digits, so work at a precision that never rounds a representable amount.
const Decimal = DefaultDecimal.clone({ precision: 64 });

const decimalPattern = /^-?\d+(\.\d+)?$/;

export class MoneyFormatError extends Error {
  override name = 'MoneyFormatError';
}

/** Parses a decimal credit string ("0.0000005", "10") into pico-credits. */
export function parseCredits(text: string): bigint {
  const trimmed = text.trim();
  if (!decimalPattern.test(trimmed)) throw new MoneyFormatError(`not a decimal number: ${JSON.stringify(text)}`);
  const value = new Decimal(trimmed);
  if (value.decimalPlaces() > SCALE) throw new MoneyFormatError(`more than ${SCALE} decimal places: ${text}`);
  return BigInt(value.times(new Decimal(10).pow(SCALE)).toFixed(0));
}

/**
 * Formats pico-credits as a decimal credit string without trailing zeros ("9.9999985", "10", "-0.25").
 * Every answer shows six of these (usage.cost and its details, most of them 0): zero and whole amounts
 * take no string work, and the fraction's trailing zeros are cut by a scan, not a regular expression.
 */
export function formatCredits(pico: bigint): string {
  if (pico === 0n) return '0';
  const negative = pico < 0n;
  const magnitude = negative ? -pico : pico;
  const whole = magnitude / PICO_PER_CREDIT;
  const rest = magnitude % PICO_PER_CREDIT;
  const sign = negative ? '-' : '';
  if (rest === 0n) return `${sign}${whole}`;
  const digits = rest.toString().padStart(SCALE, '0');
  let end = digits.length;
  while (digits.charCodeAt(end - 1) === 48) end--;
  return `${sign}${whole}.${digits.slice(0, end)}`;
}

/** True when the text is a non-negative decimal with at most 12 decimals. */
export function isCreditAmount(text: string): boolean {
  try {
    return parseCredits(text) >= 0n;
  } catch {
    return false;
  }
}
