import type { z } from 'zod';
import { echoed } from '../echoed-value.js';
import { edgeErrors, type EdgeError } from '../errors.js';

type Issue = z.core.$ZodIssue;

/**
 * Validates a parsed body with a dialect's zod schema; a failure is a 400 whose message names the
 * field path (`body.messages.0.role: ...`). No parse context: zod copies one per parse (`{ ...ctx,
 * async: false }`), which in V8 11 made fresh hidden classes per request (docs/performance.md "What brought the figures here").
 */
export function parseBody<Schema extends z.ZodType>(schema: Schema, body: unknown): z.infer<Schema> {
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  throw validationError(result.error.issues);
}

/** The most specific issue: inside a union, the branch that got furthest into the input explains best. */
function deepestIssue(issue: Issue, prefix: readonly PropertyKey[]): { path: PropertyKey[]; message: string } {
  const path = [...prefix, ...issue.path];
  if (issue.code === 'invalid_union' && issue.errors.length > 0) {
    let best: { path: PropertyKey[]; message: string } | undefined;
    for (const branch of issue.errors) {
      const first = branch[0];
      if (!first) continue;
      const candidate = deepestIssue(first, path);
      if (!best || candidate.path.length > best.path.length) best = candidate;
    }
    if (best && best.path.length > path.length) return best;
  }
  return { path, message: issue.message };
}

export function validationError(issues: readonly Issue[]): EdgeError {
  const first = issues[0];
  if (!first) return edgeErrors.invalidRequest('body: invalid request.');
  const { path, message } = deepestIssue(first, []);
  // A path holds the client's own key names (logit_bias, loose fields): bounded like any echoed value.
  const param = echoed(['body', ...path.map(String)].join('.'));
  return edgeErrors.invalidRequest(`${param}: ${message}`, param);
}
