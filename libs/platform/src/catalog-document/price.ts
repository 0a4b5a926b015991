/** Prices are credits per unit with the ledger's fixed scale: more decimals could not be charged exactly. */
export const PRICE_DECIMALS_MAX = 12;
/**
 * 8 whole digits + 12 decimals = 20 significant digits, what the ledger's decimal parsing (decimal.js
 * at its default precision) holds exactly; no real price comes near 10^8 credits per unit.
 */
export const PRICE_WHOLE_DIGITS_MAX = 8;

const plainDecimal = /^\+?(\d+)(?:\.(\d+))?$/;
const exponentDecimal = /^\+?(\d+)(?:\.(\d*))?[eE]([+-]?\d{1,3})$/;

/**
 * Turns the source text of a price (a quoted string or the raw text of a YAML number, so no float
 * ever touches it) into the canonical decimal string the ledger parses: "0.0000005", "1.5", "0".
 * Exponent notation (`5e-7`) is shifted exactly. Returns the reason when the text is not a price.
 */
export function normalizePrice(text: string): { price: string } | { reason: string } {
  const trimmed = text.trim();
  if (trimmed.startsWith('-')) return { reason: 'must be >= 0' };
  let digits: string;
  let pointPosition: number;
  const plain = plainDecimal.exec(trimmed);
  const exponent = plain ? null : exponentDecimal.exec(trimmed);
  if (plain) {
    digits = (plain[1] ?? '') + (plain[2] ?? '');
    pointPosition = (plain[1] ?? '').length;
  } else if (exponent) {
    digits = (exponent[1] ?? '') + (exponent[2] ?? '');
    pointPosition = (exponent[1] ?? '').length + Number(exponent[3]);
  } else {
    return { reason: `expected a decimal number such as "0.0000005", got ${JSON.stringify(text)}` };
  }
  if (pointPosition <= 0) {
    digits = '0'.repeat(1 - pointPosition) + digits;
    pointPosition = 1;
  } else if (pointPosition > digits.length) {
    digits = digits + '0'.repeat(pointPosition - digits.length);
  }
  const whole = digits.slice(0, pointPosition);
  const fraction = digits.slice(pointPosition).replace(/0+$/, '');
  if (fraction.length > PRICE_DECIMALS_MAX) {
    return { reason: `has ${fraction.length} decimals; at most ${PRICE_DECIMALS_MAX} are allowed` };
  }
  const wholeDigits = whole.replace(/^0+(?=\d)/, '');
  if (wholeDigits.length > PRICE_WHOLE_DIGITS_MAX) {
    return { reason: `must be below 10^${PRICE_WHOLE_DIGITS_MAX} credits` };
  }
  return { price: fraction ? `${wholeDigits}.${fraction}` : wholeDigits };
}
