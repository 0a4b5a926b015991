import type { ChatRequest, Model } from '@gateway/proto';

interface ParameterRule {
  /** Names a model may list for this field (the first is the one reported when dropped). */
  names: readonly string[];
  present(request: ChatRequest): boolean;
  drop(request: ChatRequest): void;
}

/** Canonical request fields by their chat-completions parameter names (what supported_parameters lists). */
const RULES: readonly ParameterRule[] = [
  { names: ['tools'], present: (r) => r.tools.length > 0, drop: (r) => { r.tools = []; } },
  { names: ['tool_choice'], present: (r) => r.toolChoice !== undefined, drop: (r) => { r.toolChoice = undefined; } },
  { names: ['response_format', 'structured_outputs'], present: (r) => r.responseFormat !== undefined, drop: (r) => { r.responseFormat = undefined; } },
  { names: ['temperature'], present: (r) => r.temperature !== undefined, drop: (r) => { r.temperature = undefined; } },
  { names: ['top_p'], present: (r) => r.topP !== undefined, drop: (r) => { r.topP = undefined; } },
  { names: ['top_k'], present: (r) => r.topK !== undefined, drop: (r) => { r.topK = undefined; } },
  { names: ['stop'], present: (r) => r.stop.length > 0, drop: (r) => { r.stop = []; } },
  { names: ['max_completion_tokens', 'max_tokens'], present: (r) => r.maxOutputTokens !== undefined, drop: (r) => { r.maxOutputTokens = undefined; } },
  { names: ['reasoning_effort', 'reasoning'], present: (r) => r.reasoningEffort !== undefined, drop: (r) => { r.reasoningEffort = undefined; } },
  { names: ['presence_penalty'], present: (r) => r.presencePenalty !== undefined, drop: (r) => { r.presencePenalty = undefined; } },
  { names: ['frequency_penalty'], present: (r) => r.frequencyPenalty !== undefined, drop: (r) => { r.frequencyPenalty = undefined; } },
  { names: ['parallel_tool_calls'], present: (r) => r.parallelToolCalls !== undefined, drop: (r) => { r.parallelToolCalls = undefined; } },
  { names: ['prediction'], present: (r) => r.prediction !== undefined, drop: (r) => { r.prediction = undefined; } },
  { names: ['web_search_options'], present: (r) => r.webSearchOptions !== undefined, drop: (r) => { r.webSearchOptions = undefined; } },
  { names: ['image_config'], present: (r) => r.imageAspectRatio !== undefined, drop: (r) => { r.imageAspectRatio = undefined; } },
  { names: ['user'], present: (r) => r.user !== undefined, drop: (r) => { r.user = undefined; } },
];

/** Models live as long as their catalog snapshot: one Set of their parameters each, not one per request. */
const supportedByModel = new WeakMap<Model, ReadonlySet<string>>();

function supportedParameters(model: Model): ReadonlySet<string> {
  let supported = supportedByModel.get(model);
  if (!supported) {
    supported = new Set(model.supportedParameters);
    supportedByModel.set(model, supported);
  }
  return supported;
}

/**
 * Removes every request field the model does not list (spec §1), so a provider never sees a parameter
 * it may reject; extra_body keeps only the model's extra_parameters. Returns a copy and the names dropped.
 */
export function dropUnsupportedParameters(request: ChatRequest, model: Model): { request: ChatRequest; dropped: string[] } {
  const supported = supportedParameters(model);
  const copy: ChatRequest = { ...request };
  const dropped: string[] = [];
  for (const rule of RULES) {
    if (!rule.present(copy) || rule.names.some((name) => supported.has(name))) continue;
    rule.drop(copy);
    dropped.push(rule.names[0]!);
  }
  if (copy.extraBody !== undefined) {
    const allowed = new Set(model.extraParameters);
    let extra: unknown;
    try {
      extra = JSON.parse(copy.extraBody);
    } catch {
      extra = undefined;
    }
    if (extra && typeof extra === 'object' && !Array.isArray(extra)) {
      const kept: Record<string, unknown> = {};
      for (const [field, value] of Object.entries(extra)) {
        if (allowed.has(field)) kept[field] = value;
        else dropped.push(field);
      }
      copy.extraBody = Object.keys(kept).length > 0 ? JSON.stringify(kept) : undefined;
    } else {
      copy.extraBody = undefined;
      dropped.push('extra_body');
    }
  }
  return { request: copy, dropped };
}
