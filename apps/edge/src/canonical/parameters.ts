import type { ChatRequest } from '@gateway/proto';
import { PARAMETERS, modelTakes, type CanonicalParameter, type Dialect, type ParameterRow, type Spelling } from '@gateway/platform';
import type { CatalogModel } from '../catalog-cache.js';

/**
 * The forwarded parameters are THE table in libs/platform (`PARAMETERS`, DESIGN §6): each canonical
 * request field a model may lack, the `supported_parameters` names that mean the model has it, and each
 * dialect's spelling. A field whose model lists none of the names is dropped here at the edge, before
 * any provider (spec §1, DESIGN §2 step 3: the edge is the one place that drops for a MODEL), and named
 * in `x-gateway-dropped-params` in the spelling the client sent. A new parameter is one row there, its
 * value conversion in each dialect's converter, and a sample in `parameters.test.ts`.
 */
export const FORWARDED_PARAMETERS: Readonly<Record<CanonicalParameter, ParameterRow>> = PARAMETERS;
export type { CanonicalParameter, Dialect };

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
    request: ['model', 'messages', 'stream', 'stream_options', 'routing', 'prompt_cache_key', 'cache_control', 'models', 'provider'],
    // spec §4.8: logit_bias is accepted in the shape and not passed to providers. `prediction` and
    // `web_search_options` are never in a model's supported_parameters (spec §2.6; the catalog strips
    // them, apps/catalog/src/catalog-snapshot.ts HIDDEN_PARAMETERS), so no model takes them either.
    // `store` would keep the conversation at the provider under the operator's account, where the
    // client can never read it back (the gateway serves no stored completions): never passed on.
    neverForwarded: ['logit_bias', 'prediction', 'web_search_options', 'store'],
  },
  responses: {
    // `store`, `include`, `truncation` are the gateway's own behaviour (convert-responses-request.ts);
    // the stateful fields are refused before this. `prompt_cache_key`, `cache_control`: as in chat.
    request: [
      'model', 'input', 'instructions', 'stream', 'stream_options', 'routing', 'store', 'include', 'truncation', 'previous_response_id', 'background', 'conversation',
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
  for (const [parameter, row] of Object.entries(FORWARDED_PARAMETERS) as [CanonicalParameter, ParameterRow][]) {
    for (const spelling of row.spellings[dialect] ?? []) {
      const { path, present } = typeof spelling === 'string' ? { path: spelling, present: undefined } : (spelling as Spelling);
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
  return modelTakes(model.supportedParameters, parameter);
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
  private readonly fields: Record<string, unknown>;
  private readonly compiled: CompiledDialect;

  constructor(
    private readonly model: CatalogModel,
    dialect: Dialect,
    body: object,
    private readonly presence?: Readonly<Record<string, boolean>>,
  ) {
    const fields = (this.fields = body as Record<string, unknown>);
    const compiled = (this.compiled = COMPILED[dialect]);
    for (const spelling of compiled.spellings) {
      if (!this.asked(spelling)) continue;
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

  /**
   * A field the model has that the converter still cannot send, named as dropped in the client's
   * spelling (responses `top_logprobs` without the logprobs it ranks).
   */
  drop(name: string): void {
    this.dropped.push(name);
  }

  /** JSON text of the extra parameters the model lists, or undefined. */
  extraBody(): string | undefined {
    return this.hasExtra ? JSON.stringify(this.extra) : undefined;
  }

  droppedParams(): string[] {
    return [...new Set(this.dropped)].sort();
  }

  /**
   * Routing's drops (canonical names, or extra_body keys as the client wrote them) in the client's
   * spelling: the field(s) the client sent for each (`metadata.user_id` for `user` in messages); a name
   * the client spelled no other way stays as it is.
   */
  clientSpelling(routerDropped: readonly string[]): readonly string[] {
    if (routerDropped.length === 0) return routerDropped;
    // Looked up only when routing dropped something (rare): the usual request keeps no spellings.
    return routerDropped.flatMap((name) => {
      const spelled = this.compiled.spellings
        .filter((spelling) => spelling.parameter === name && this.asked(spelling))
        .map((spelling) => spelling.name);
      return spelled.length > 0 ? spelled : [name];
    });
  }

  /**
   * What a fallback model that served goes without: the parameters forwarded for the first model that
   * `model` lacks (routing cleared them, see unsupportedFields), in the client's spelling.
   */
  lackedBy(model: CatalogModel): string[] {
    const lacked: string[] = [];
    for (const spelling of this.compiled.spellings) {
      if (this.forwarded.has(spelling.parameter) && !modelSupports(model, spelling.parameter) && this.asked(spelling)) lacked.push(spelling.name);
    }
    return lacked;
  }

  private asked(spelling: CompiledSpelling): boolean {
    const value = valueAt(this.fields, spelling.path);
    return this.presence?.[spelling.name] ?? (asks(value) && (spelling.present === undefined || spelling.present(value)));
  }
}

/** A converted request's router drops in the client's spelling (see ParameterGate.clientSpelling). */
export type ClientSpelling = (routerDropped: readonly string[]) => readonly string[];

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
