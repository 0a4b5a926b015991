import { jsonSchemaProblem } from '@gateway/platform/json-schema';
import type { CatalogModel } from '../catalog-cache.js';
import { echoed } from '../echoed-value.js';
import { edgeErrors } from '../errors.js';

/** Checks every dialect makes of a request against the model it resolved to, before admission. */

/** Spec §4.8: an input the model cannot read is a 400 `unsupported_modality` naming the block. */
export function requireModality(model: CatalogModel, modality: string, path: string): void {
  if (!model.inputModalities.has(modality)) {
    throw edgeErrors.invalidRequest(`${path}: the model \`${model.id}\` does not accept ${modality} input.`, path, 'unsupported_modality');
  }
}

/**
 * A client's JSON schema that fails its draft's meta-schema (`{"type": 12}`) is the client's 400 here,
 * before admission, whatever provider would have served it: an OpenAI-compatible provider would refuse
 * it (or worse, accept it), and a provider without native JSON modes cannot check answers against it.
 * Only requests that carry a schema pay (tens of µs; nothing compiled, nothing cached).
 */
export function requireValidSchema(schema: Record<string, unknown>, param: string): void {
  requireBoundedSchema(schema, param);
  const problem = jsonSchemaProblem(schema);
  if (problem === undefined) return;
  throw edgeErrors.invalidRequest(`${param}: not a valid JSON Schema: ${echoed(problem)}.`, param, 'invalid_json_schema');
}

/**
 * Bounds of a client's JSON schema (issue 29: an `enum` of 100,000 strings took 55 s to reach its 400 —
 * the meta-schema's `uniqueItems` on `enum` is quadratic — and compiling a schema for the answer check
 * costs ~1 ms per property). Counted by one walk that stops at the bound, before anything else looks at
 * the schema. OpenAI's own structured outputs allow at most 1,000 enum values in a schema.
 */
export const MAX_SCHEMA_NODES = 2_000;
export const MAX_SCHEMA_ENUM_VALUES = 1_000;

/** 400 naming the bound when the schema holds more than MAX_SCHEMA_NODES values or MAX_SCHEMA_ENUM_VALUES enum values. */
export function requireBoundedSchema(schema: unknown, param: string): void {
  let nodes = 0;
  let enumValues = 0;
  const pending: unknown[] = [schema];
  while (pending.length > 0) {
    const value = pending.pop();
    if (++nodes > MAX_SCHEMA_NODES) {
      throw edgeErrors.invalidRequest(
        `${param}: the schema holds more than ${MAX_SCHEMA_NODES} values (keys, subschemas and array entries counted); at most ${MAX_SCHEMA_NODES} are accepted.`,
        param, 'json_schema_too_large',
      );
    }
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      for (const item of value) pending.push(item);
      continue;
    }
    for (const [key, child] of Object.entries(value)) {
      if (key === 'enum' && Array.isArray(child)) {
        enumValues += child.length;
        if (enumValues > MAX_SCHEMA_ENUM_VALUES) {
          throw edgeErrors.invalidRequest(
            `${param}: the schema's enums hold more than ${MAX_SCHEMA_ENUM_VALUES} values in all; at most ${MAX_SCHEMA_ENUM_VALUES} are accepted.`,
            param, 'json_schema_too_large',
          );
        }
      }
      pending.push(child);
    }
  }
}

const REASONING_LEVELS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'];

/** Spec §4.8: a level the model lacks moves to the nearest one it has (ties go up). */
export function nearestReasoningEffort(requested: string, available: readonly string[]): string {
  if (available.length === 0 || available.includes(requested)) return requested;
  const target = REASONING_LEVELS.indexOf(requested);
  let best = available[0] as string;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const level of available) {
    const index = REASONING_LEVELS.indexOf(level);
    if (index < 0) continue;
    const distance = Math.abs(index - target);
    if (distance < bestDistance || (distance === bestDistance && index > target)) {
      best = level;
      bestDistance = distance;
    }
  }
  return best;
}

/**
 * A thinking budget in tokens (messages `thinking.budget_tokens`) as a reasoning level, for models and
 * providers that take a level rather than a budget. Bands follow the usual budgets clients send.
 */
export function effortForBudget(budgetTokens: number): string {
  if (budgetTokens < 2_048) return 'minimal';
  if (budgetTokens < 8_192) return 'low';
  if (budgetTokens < 24_576) return 'medium';
  return 'high';
}
