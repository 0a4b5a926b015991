// Money arrives as exact decimal strings (balance, credits) or as JSON numbers written with every digit
// (prices per token, key amounts). Nothing here computes money in floating point: numbers are read back
// through their shortest decimal spelling and handled as scaled BigInts.

const SCALE = 12;
const FACTOR = 10n ** BigInt(SCALE);

/** A decimal spelling ("0.000052", "3e-06", "-1.5", 7.5e-7) as an integer count of 1e-12 units. */
export function toUnits(value: string | number): bigint {
  const text = typeof value === 'number' ? String(value) : value.trim();
  const match = /^(-)?(\d*)(?:\.(\d*))?(?:e([+-]?\d+))?$/i.exec(text);
  if (!match || (match[2] === '' && (match[3] ?? '') === '')) throw new Error(`not a decimal: ${text}`);
  const [, sign, whole = '', fraction = '', exponentText] = match;
  const exponent = exponentText === undefined ? 0 : Number(exponentText);
  let digits = BigInt((whole + fraction) || '0');
  const shift = SCALE + exponent - fraction.length;
  if (shift >= 0) digits *= 10n ** BigInt(shift);
  else digits /= 10n ** BigInt(-shift);
  return sign ? -digits : digits;
}

/** Units back to a plain decimal string, trailing zeros dropped, at least `minDecimals` decimals. */
export function fromUnits(units: bigint, minDecimals = 0): string {
  const negative = units < 0n;
  const absolute = negative ? -units : units;
  const whole = absolute / FACTOR;
  let fraction = (absolute % FACTOR).toString().padStart(SCALE, '0').replace(/0+$/, '');
  if (fraction.length < minDecimals) fraction = fraction.padEnd(minDecimals, '0');
  return `${negative ? '-' : ''}${whole}${fraction ? `.${fraction}` : ''}`;
}

/** A price per token as the price per million tokens ("3e-06" -> "3"). */
export function perMillion(perToken: string | number): string {
  return fromUnits(toUnits(perToken) * 1_000_000n, 2);
}

/** The exact sum of decimal amounts. */
export function sum(values: readonly (string | number)[]): string {
  return fromUnits(values.reduce<bigint>((total, value) => total + toUnits(value), 0n));
}

/** An amount for display with at most `decimals` decimals (rounded half up), for chart labels. */
export function rounded(value: string | number, decimals = 6): string {
  const units = toUnits(value);
  const step = 10n ** BigInt(SCALE - decimals);
  const half = step / 2n;
  const adjusted = units >= 0n ? ((units + half) / step) * step : -(((-units + half) / step) * step);
  return fromUnits(adjusted);
}
