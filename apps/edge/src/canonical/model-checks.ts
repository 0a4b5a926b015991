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
  const problem = jsonSchemaProblem(schema);
  if (problem === undefined) return;
  throw edgeErrors.invalidRequest(`${param}: not a valid JSON Schema: ${echoed(problem)}.`, param, 'invalid_json_schema');
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
