import type { ChatRequest } from '@gateway/proto';
import type { CatalogModel } from '../catalog-cache.js';

/** The request dialects that convert into the canonical ChatRequest. */
export type Dialect = 'chat' | 'responses' | 'messages';

/**
 * A dialect's field for a parameter: a dotted path into the request body. `present` decides when the
 * field asks for something (default: not null, and not an empty list).
 */
interface Spelling {
  readonly path: string;
  readonly present?: (value: unknown) => boolean;
}

interface ForwardedParameter {
  /** The canonical ChatRequest field(s) it fills (their proto types are its canonical type). */
  readonly fields: readonly (keyof ChatRequest)[];
  /**
   * The value and how it is checked. Ranges are checked by each dialect's zod schema (they differ:
   * messages' temperature is 0–1, chat's 0–2); checks named here run in the dialect's converter.
   */
  readonly value: string;
  /** `supported_parameters` names (OpenRouter's vocabulary, used by the catalog): any one means the model has it. */
  readonly supportedNames: readonly string[];
  /** Each dialect's field(s) for it; a dialect without an entry has no such field. */
  readonly spellings: Partial<Record<Dialect, readonly (string | Spelling)[]>>;
}

/**
 * THE table of forwarded parameters (DESIGN §6): each canonical request field a model may lack, the
 * `supported_parameters` names that mean the model has it, and each dialect's spelling. A field whose
 * model lists none of the names is dropped here at the edge, before any provider (spec §1, DESIGN §2
 * step 3: the edge is the one place that drops), and named in `x-gateway-dropped-params` in the
 * spelling the client sent. A new parameter is one row here, its value conversion in each dialect's
 * converter, and a sample in `parameters-table.test.ts`.
 */
export const FORWARDED_PARAMETERS = {
  tools: {
    fields: ['tools'],
    value: 'function tools; messages refuses server tools (400) whatever the model',
    supportedNames: ['tools'],
    spellings: { chat: ['tools'], responses: ['tools'], messages: ['tools'] },
  },
  tool_choice: {
    fields: ['toolChoice'],
    value: 'auto | none | required | one named tool; responses refuses a hosted tool (400) and forwards it only with tools',
    supportedNames: ['tool_choice'],
    spellings: { chat: ['tool_choice'], responses: ['tool_choice'], messages: ['tool_choice'] },
  },
  response_format: {
    fields: ['responseFormat'],
    value: 'text | json_object | json_schema; a JSON schema is checked against the meta-schema (400 invalid_json_schema) whatever the model',
    supportedNames: ['response_format', 'structured_outputs'],
    spellings: { chat: ['response_format'], responses: ['text.format'], messages: ['output_config.format'] },
  },
  temperature: {
    fields: ['temperature'],
    value: 'number (chat, responses 0–2; messages 0–1)',
    supportedNames: ['temperature'],
    spellings: { chat: ['temperature'], responses: ['temperature'], messages: ['temperature'] },
  },
  top_p: {
    fields: ['topP'],
    value: 'number 0–1',
    supportedNames: ['top_p'],
    spellings: { chat: ['top_p'], responses: ['top_p'], messages: ['top_p'] },
  },
  top_k: {
    fields: ['topK'],
    value: 'integer ≥ 0',
    supportedNames: ['top_k'],
    spellings: { messages: ['top_k'] },
  },
  stop: {
    fields: ['stop'],
    value: 'list of strings (chat also takes one string)',
    supportedNames: ['stop'],
    spellings: { chat: ['stop'], messages: ['stop_sequences'] },
  },
  max_output_tokens: {
    fields: ['maxOutputTokens'],
    value: 'integer ≥ 1, at most 2^32 − 1',
    supportedNames: ['max_completion_tokens', 'max_tokens'],
    spellings: { chat: ['max_completion_tokens', 'max_tokens'], responses: ['max_output_tokens'], messages: ['max_tokens'] },
  },
  reasoning: {
    fields: ['reasoningEffort', 'reasoningSummary', 'thinkingBudgetTokens', 'thinkingMode', 'outputEffort'],
    value: 'a level moved to the nearest one the model has; messages: a thinking budget (also as a level); responses: a summary wish',
    supportedNames: ['reasoning_effort', 'reasoning'],
    spellings: {
      chat: ['reasoning_effort'],
      responses: ['reasoning.effort', 'reasoning.summary'],
      // `thinking: {type: 'disabled'}` asks for nothing.
      messages: [{ path: 'thinking', present: (value) => (value as { type?: unknown }).type !== 'disabled' }, 'output_config.effort'],
    },
  },
  presence_penalty: {
    fields: ['presencePenalty'],
    value: 'number −2–2',
    supportedNames: ['presence_penalty'],
    spellings: { chat: ['presence_penalty'], responses: ['presence_penalty'] },
  },
  frequency_penalty: {
    fields: ['frequencyPenalty'],
    value: 'number −2–2',
    supportedNames: ['frequency_penalty'],
    spellings: { chat: ['frequency_penalty'], responses: ['frequency_penalty'] },
  },
  parallel_tool_calls: {
    fields: ['parallelToolCalls'],
    value: 'boolean; responses forwards it only with tools; messages sends `disable_parallel_tool_use` as false here where the model has it',
    supportedNames: ['parallel_tool_calls'],
    spellings: { chat: ['parallel_tool_calls'], responses: ['parallel_tool_calls'] },
  },
  image_config: {
    fields: ['imageAspectRatio'],
    value: 'aspect_ratio, one of the ratios in the chat schema',
    supportedNames: ['image_config'],
    spellings: { chat: ['image_config'] },
  },
  seed: {
    fields: ['seed'],
    value: 'integer (a JS safe integer); kinds without a seed go without it and name it (docs/providers.md)',
    supportedNames: ['seed'],
    spellings: { chat: ['seed'] },
  },
  verbosity: {
    fields: ['verbosity'],
    value: 'low | medium | high (OpenAI GPT-5 output length); kinds without it go without it and name it',
    supportedNames: ['verbosity'],
    spellings: { chat: ['verbosity'], responses: ['text.verbosity'] },
  },
  user: {
    fields: ['user'],
    value: 'string: the end user, for the provider’s abuse monitoring (OpenAI `user`)',
    supportedNames: ['user'],
    spellings: { chat: ['user'], responses: ['user'], messages: ['metadata.user_id'] },
  },
} as const satisfies Record<string, ForwardedParameter>;

export type CanonicalParameter = keyof typeof FORWARDED_PARAMETERS;

/**
 * Per dialect: the fields that are the request itself (never "parameters" a model may lack), and the
 * fields accepted in the shape but never passed to a provider (always named as dropped, even when a
 * model lists them as extra parameters). Any other top-level field is an extra parameter: forwarded
 * in `extra_body` when the model lists it in `extra_parameters`, else dropped and named.
 */
export const DIALECT_FIELDS: Record<Dialect, { readonly request: readonly string[]; readonly neverForwarded: readonly string[] }> = {
  chat: {
    // `prompt_cache_key` and top-level `cache_control` are the gateway's own (cache affinity, the last
    // block's breakpoint: canonical/cache-control.ts), never parameters a model may lack.
    // `n` is the request's shape: the schema takes only 1 (one choice per answer) and refuses more (400).
    request: ['model', 'messages', 'stream', 'stream_options', 'routing', 'prompt_cache_key', 'cache_control', 'models', 'provider', 'n'],
    // spec §4.8: logit_bias is accepted in the shape and not passed to providers. `prediction` and
    // `web_search_options` are never in a model's supported_parameters (spec §2.6; the catalog strips
    // them, apps/catalog/src/catalog-snapshot.ts HIDDEN_PARAMETERS), so no model takes them either.
    // `store` would keep the conversation at the provider under the operator's account, where the
    // client can never read it back (the gateway serves no stored completions): never passed on.
    // `logprobs` / `top_logprobs`: no answer converter carries them back yet, so a provider asked for them
    // would answer what the caller never sees; named instead, even where a model lists them.
    neverForwarded: ['logit_bias', 'prediction', 'web_search_options', 'store', 'logprobs', 'top_logprobs'],
  },
  responses: {
    // `store`, `include`, `truncation` are the gateway's own behaviour (convert-responses-request.ts);
    // the stateful fields are refused before this. `prompt_cache_key`, `cache_control`: as in chat.
    request: [
      'model', 'input', 'instructions', 'stream', 'stream_options', 'routing', 'store', 'include', 'truncation', 'previous_response_id', 'background',
      'prompt_cache_key', 'cache_control', 'models', 'provider',
    ],
    // `metadata` is the client's own labels (echoed).
    neverForwarded: ['metadata'],
  },
  messages: {
    // `models` and `provider`: model fallbacks and provider preferences (inference/routing-choices.ts), in every dialect.
    request: ['model', 'messages', 'system', 'stream', 'routing', 'cache_control', 'models', 'provider'],
    // messages-schema.ts says why each is accepted and not forwarded.
    // `thinking.display` (summarized | omitted) has no canonical field: the thinking goes on, its display does not.
    neverForwarded: ['service_tier', 'container', 'inference_geo', 'speed', 'diagnostics', 'context_management', 'mcp_servers', 'thinking.display'],
  },
};

interface CompiledSpelling {
  readonly parameter: CanonicalParameter;
  readonly name: string;
  readonly path: readonly string[];
  readonly present: ((value: unknown) => boolean) | undefined;
}

interface CompiledDialect {
  readonly spellings: readonly CompiledSpelling[];
  readonly neverForwarded: readonly { name: string; path: readonly string[] }[];
  /** Top-level fields the two lists above and the request fields account for. */
  readonly known: ReadonlySet<string>;
}

function compile(dialect: Dialect): CompiledDialect {
  const spellings: CompiledSpelling[] = [];
  const known = new Set(DIALECT_FIELDS[dialect].request);
  for (const [parameter, row] of Object.entries(FORWARDED_PARAMETERS) as [CanonicalParameter, ForwardedParameter][]) {
    for (const spelling of row.spellings[dialect] ?? []) {
      const { path, present } = typeof spelling === 'string' ? { path: spelling, present: undefined } : spelling;
      spellings.push({ parameter, name: path, path: path.split('.'), present });
      known.add(path.split('.')[0]!);
    }
  }
  const neverForwarded = DIALECT_FIELDS[dialect].neverForwarded.map((name) => ({ name, path: name.split('.') }));
  for (const { path } of neverForwarded) known.add(path[0]!);
  return { spellings, neverForwarded, known };
}

const COMPILED: Record<Dialect, CompiledDialect> = { chat: compile('chat'), responses: compile('responses'), messages: compile('messages') };

function valueAt(body: Record<string, unknown>, path: readonly string[]): unknown {
  let value: unknown = body;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[key];
  }
  return value;
}

function asks(value: unknown): boolean {
  return value !== undefined && value !== null && !(Array.isArray(value) && value.length === 0);
}

export function modelSupports(model: CatalogModel, parameter: CanonicalParameter): boolean {
  for (const name of FORWARDED_PARAMETERS[parameter].supportedNames) if (model.supportedParameters.has(name)) return true;
  return false;
}

/**
 * One request's forwarding decisions, made once from the table: which canonical parameters go on,
 * which extra parameters go in `extra_body`, and the client's name of every field that goes nowhere.
 * `presence` overrides the table's presence test for a spelling (responses: a tool list of hosted
 * tools only asks for no tools).
 */
export class ParameterGate {
  private readonly forwarded = new Set<CanonicalParameter>();
  private readonly dropped: string[] = [];
  private readonly extra: Record<string, unknown> = {};
  private hasExtra = false;

  constructor(
    private readonly model: CatalogModel,
    dialect: Dialect,
    body: object,
    presence?: Readonly<Record<string, boolean>>,
  ) {
    const fields = body as Record<string, unknown>;
    const compiled = COMPILED[dialect];
    for (const spelling of compiled.spellings) {
      const value = valueAt(fields, spelling.path);
      const present = presence?.[spelling.name] ?? (asks(value) && (spelling.present === undefined || spelling.present(value)));
      if (!present) continue;
      if (modelSupports(model, spelling.parameter)) this.forwarded.add(spelling.parameter);
      else this.dropped.push(spelling.name);
    }
    for (const field of compiled.neverForwarded) if (asks(valueAt(fields, field.path))) this.dropped.push(field.name);
    for (const name in fields) {
      const value = fields[name];
      if (value === undefined || value === null || compiled.known.has(name)) continue;
      if (model.extraParameters.has(name)) {
        this.extra[name] = value;
        this.hasExtra = true;
      } else {
        this.dropped.push(name);
      }
    }
  }

  /** Whether the client asked for this parameter and the model has it. */
  forwards(parameter: CanonicalParameter): boolean {
    return this.forwarded.has(parameter);
  }

  /** Whether the model has the parameter (for a field the converter derives, never one the client named). */
  supports(parameter: CanonicalParameter): boolean {
    return modelSupports(this.model, parameter);
  }

  /** JSON text of the extra parameters the model lists, or undefined. */
  extraBody(): string | undefined {
    return this.hasExtra ? JSON.stringify(this.extra) : undefined;
  }

  droppedParams(): string[] {
    return [...new Set(this.dropped)].sort();
  }
}

/**
 * The table's parameters the client sent, whatever the model (`provider.require_parameters`: a model
 * serves the request only when it has every one). Spelled as the dialect spells them, presence as the gate judges it.
 */
export function sentParameters(dialect: Dialect, body: object): CanonicalParameter[] {
  const fields = body as Record<string, unknown>;
  const sent: CanonicalParameter[] = [];
  for (const spelling of COMPILED[dialect].spellings) {
    const value = valueAt(fields, spelling.path);
    if (!asks(value) || (spelling.present !== undefined && !spelling.present(value))) continue;
    if (!sent.includes(spelling.parameter)) sent.push(spelling.parameter);
  }
  return sent;
}

/**
 * The canonical fields a converted request sets that `model` lacks (a fallback model's: the request was
 * converted for the first model). Routing clears them before that model's providers are called, so the
 * table stays the one place that decides what a model gets.
 */
export function unsupportedFields(request: ChatRequest, model: CatalogModel): string[] {
  const fields = request as unknown as Record<string, unknown>;
  const unsupported: string[] = [];
  for (const parameter of Object.keys(FORWARDED_PARAMETERS) as CanonicalParameter[]) {
    if (modelSupports(model, parameter)) continue;
    for (const field of FORWARDED_PARAMETERS[parameter].fields) if (asks(fields[field])) unsupported.push(field);
  }
  return unsupported;
}
