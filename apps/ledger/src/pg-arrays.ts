/**
 * Postgres array literals for the settler's unnest parameters. node-postgres escapes every element
 * of a JS array on its own; a settlement batch passes tens of thousands of them, so the literals are
 * built here in one pass (values are never null). Pass the result as text with a `::type[]` cast.
 */

/** Quoted only when needed: ids and names are almost always plain. */
const NEEDS_QUOTES = /[\s",{}\\]|^$|^null$/i;

export function textArrayLiteral(values: readonly string[]): string {
  let literal = '{';
  for (let index = 0; index < values.length; index++) {
    const value = values[index]!;
    if (index > 0) literal += ',';
    literal += NEEDS_QUOTES.test(value) ? `"${value.replace(/["\\]/g, '\\$&')}"` : value;
  }
  return `${literal}}`;
}

export function integerArrayLiteral(values: ReadonlyArray<bigint | number>): string {
  return `{${values.join(',')}}`;
}

export function booleanArrayLiteral(values: readonly boolean[]): string {
  let literal = '{';
  for (let index = 0; index < values.length; index++) literal += index > 0 ? (values[index] ? ',t' : ',f') : (values[index] ? 't' : 'f');
  return `${literal}}`;
}

/** Integers where `undefined` is SQL null (a column the batch leaves unknown for some rows). */
export function nullableIntegerArrayLiteral(values: ReadonlyArray<bigint | number | undefined>): string {
  let literal = '{';
  for (let index = 0; index < values.length; index++) {
    const value = values[index];
    if (index > 0) literal += ',';
    literal += value === undefined ? 'NULL' : String(value);
  }
  return `${literal}}`;
}
