import type { ChatRequest } from '@gateway/proto';

/**
 * THE parameter vocabulary (DESIGN §6, issue 38 item 3): one row per canonical request parameter, read by
 * the edge (which parameters a MODEL takes, each dialect's spelling, `x-gateway-dropped-params` in the
 * client's spelling) and by routing (which parameters an UPSTREAM KIND can send, which a learned refusal
 * may drop, how a provider's error names them). A row's key is the parameter's canonical name: the chat
 * completions spelling (the learned map's names, shared between routing replicas, are these).
 * docs/providers.md's per-kind table is generated from this one (`parameterTableMarkdown`; a test
 * compares them).
 */

/** The request dialects that convert into the canonical ChatRequest. */
export type Dialect = 'chat' | 'responses' | 'messages';

/**
 * The upstream wire formats, as far as parameters go: `openai` is every OpenAI-wire kind (openai,
 * azure-openai), `anthropic` Anthropic Messages (anthropic, Vertex's Claude), `gemini` generateContent
 * (gemini, Vertex's Gemini), `bedrock-claude` / `bedrock` Converse for Claude and for other models.
 */
export type UpstreamWire = 'openai' | 'anthropic' | 'gemini' | 'bedrock-claude' | 'bedrock' | 'simulated';
export const UPSTREAM_WIRES: readonly UpstreamWire[] = ['openai', 'anthropic', 'gemini', 'bedrock-claude', 'bedrock', 'simulated'];

/**
 * What a wire does with the parameter: `true` sent as the parameter's own field; a string: sent, and how
 * (for the docs); `false`: the wire has no field for it, so a request goes without it and names it in
 * `x-gateway-dropped-params`; `'refused'`: the wire cannot answer such a request at all (400 when no
 * provider of the model can).
 */
export type WireSupport = true | string | false | 'refused';

/**
 * A dialect's field for a parameter: a dotted path into the request body. `present` decides when the
 * field asks for something (default: not null, and not an empty list).
 */
export interface Spelling {
  readonly path: string;
  readonly present?: (value: unknown) => boolean;
}

export interface ParameterRow {
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
  /** A dialect's request header for it (read by the pipeline, not the body gate). */
  readonly headers?: Partial<Record<Dialect, string>>;
  /**
   * Whether an upstream's refusal of the parameter may be learned and the request retried without it
   * (the learned capability map). Not so for what makes the request what it is: without tools, the
   * response format, the output bound or the choice count it would be another request.
   */
  readonly learnable: boolean;
  /** Providers' own names of the field (matched ignoring case and `_`), as their refusals name it. */
  readonly wireNames: readonly string[];
  /** Per upstream wire: what it does with it. */
  readonly wires: Readonly<Record<UpstreamWire, WireSupport>>;
}

const EVERY_WIRE = { openai: true, anthropic: true, gemini: true, 'bedrock-claude': true, bedrock: true, simulated: true } as const;
/** Only the OpenAI wire has a field for it (the others go without it and name it). */
const OPENAI_ONLY = { openai: true, anthropic: false, gemini: false, 'bedrock-claude': false, bedrock: false, simulated: true } as const;

export const PARAMETERS = {
  tools: {
    fields: ['tools'],
    value: 'function tools; messages refuses server tools (400) whatever the model',
    supportedNames: ['tools'],
    spellings: { chat: ['tools'], responses: ['tools'], messages: ['tools'] },
    learnable: false,
    wireNames: ['tools', 'functionDeclarations', 'toolConfig'],
    wires: EVERY_WIRE,
  },
  tool_choice: {
    fields: ['toolChoice'],
    value: 'auto | none | required | one named tool; responses refuses a hosted tool (400) and forwards it only with tools',
    supportedNames: ['tool_choice'],
    spellings: { chat: ['tool_choice'], responses: ['tool_choice'], messages: ['tool_choice'] },
    learnable: false,
    wireNames: ['tool_choice', 'tool_config'],
    wires: { ...EVERY_WIRE, gemini: '`functionCallingConfig`', 'bedrock-claude': '`toolChoice`', bedrock: '`toolChoice`' },
  },
  response_format: {
    fields: ['responseFormat'],
    value: 'text | json_object | json_schema; a JSON schema is checked against the meta-schema (400 invalid_json_schema) whatever the model',
    supportedNames: ['response_format', 'structured_outputs'],
    spellings: { chat: ['response_format'], responses: ['text.format'], messages: ['output_config.format'] },
    learnable: false,
    wireNames: ['response_format', 'responseMimeType', 'responseSchema', 'responseJsonSchema'],
    wires: {
      ...EVERY_WIRE,
      anthropic: 'instructed and checked',
      gemini: '`responseJsonSchema`',
      'bedrock-claude': 'instructed and checked',
      bedrock: 'instructed and checked',
    },
  },
  temperature: {
    fields: ['temperature'],
    value: 'number (chat, responses 0–2; messages 0–1)',
    supportedNames: ['temperature'],
    spellings: { chat: ['temperature'], responses: ['temperature'], messages: ['temperature'] },
    learnable: true,
    wireNames: ['temperature'],
    wires: { ...EVERY_WIRE, anthropic: 'clamped to 0–1; with thinking on only 1, else named', gemini: '`generationConfig`', 'bedrock-claude': '`inferenceConfig`, clamped to 0–1; with thinking on only 1, else named', bedrock: '`inferenceConfig`' },
  },
  top_p: {
    fields: ['topP'],
    value: 'number 0–1',
    supportedNames: ['top_p'],
    spellings: { chat: ['top_p'], responses: ['top_p'], messages: ['top_p'] },
    learnable: true,
    wireNames: ['top_p'],
    wires: { ...EVERY_WIRE, anthropic: 'with thinking on only ≥ 0.95, else named', gemini: '`generationConfig`', 'bedrock-claude': '`inferenceConfig`; with thinking on only ≥ 0.95, else named', bedrock: '`inferenceConfig`' },
  },
  top_k: {
    fields: ['topK'],
    value: 'integer ≥ 0',
    supportedNames: ['top_k'],
    spellings: { messages: ['top_k'] },
    learnable: true,
    wireNames: ['top_k'],
    wires: { ...EVERY_WIRE, anthropic: 'with thinking on named', gemini: '`generationConfig`', 'bedrock-claude': '`additionalModelRequestFields`; with thinking on named', bedrock: false },
  },
  stop: {
    fields: ['stop'],
    value: 'list of strings (chat also takes one string)',
    supportedNames: ['stop'],
    spellings: { chat: ['stop'], messages: ['stop_sequences'] },
    learnable: true,
    wireNames: ['stop', 'stop_sequences'],
    wires: { ...EVERY_WIRE, anthropic: '`stop_sequences` (whitespace-only ones go without, named)', gemini: '`stopSequences` (at most 5; more are named)', 'bedrock-claude': '`stopSequences`', bedrock: '`stopSequences`' },
  },
  max_output_tokens: {
    fields: ['maxOutputTokens'],
    value: 'integer ≥ 1, at most 2^32 − 1',
    supportedNames: ['max_completion_tokens', 'max_tokens'],
    spellings: { chat: ['max_completion_tokens', 'max_tokens'], responses: ['max_output_tokens'], messages: ['max_tokens'] },
    learnable: false,
    wireNames: ['max_tokens', 'max_completion_tokens', 'maxOutputTokens', 'max_output_tokens', 'maxTokens'],
    wires: { openai: '`max_completion_tokens`', anthropic: '`max_tokens`', gemini: '`maxOutputTokens`', 'bedrock-claude': '`maxTokens`', bedrock: '`maxTokens`', simulated: true },
  },
  reasoning_effort: {
    fields: ['reasoningEffort', 'reasoningSummary', 'thinkingBudgetTokens', 'thinkingMode', 'outputEffort'],
    value: 'a level moved to the nearest one the model has; messages: a thinking budget (also as a level); responses: a summary wish',
    supportedNames: ['reasoning_effort', 'reasoning'],
    spellings: {
      chat: ['reasoning_effort'],
      responses: ['reasoning.effort', 'reasoning.summary'],
      // `thinking: {type: 'disabled'}` asks for nothing.
      messages: [{ path: 'thinking', present: (value) => (value as { type?: unknown }).type !== 'disabled' }, 'output_config.effort'],
    },
    learnable: true,
    // Anthropic's extended thinking and effort, Gemini's thinking configuration: the same request field.
    wireNames: ['reasoning_effort', 'thinking', 'output_config.effort', 'thinkingConfig'],
    wires: {
      openai: '`reasoning_effort`',
      anthropic: '`thinking` budget; messages `thinking: {type: "adaptive"}` and `output_config.effort` as written; with a forced tool choice named',
      gemini: '`thinkingConfig`',
      'bedrock-claude': 'Claude `thinking` budget; with a forced tool choice named',
      bedrock: false,
      simulated: true,
    },
  },
  presence_penalty: {
    fields: ['presencePenalty'],
    value: 'number −2–2',
    supportedNames: ['presence_penalty'],
    spellings: { chat: ['presence_penalty'], responses: ['presence_penalty'] },
    learnable: true,
    wireNames: ['presence_penalty'],
    wires: { ...OPENAI_ONLY, gemini: '`generationConfig`' },
  },
  frequency_penalty: {
    fields: ['frequencyPenalty'],
    value: 'number −2–2',
    supportedNames: ['frequency_penalty'],
    spellings: { chat: ['frequency_penalty'], responses: ['frequency_penalty'] },
    learnable: true,
    wireNames: ['frequency_penalty'],
    wires: { ...OPENAI_ONLY, gemini: '`generationConfig`' },
  },
  parallel_tool_calls: {
    fields: ['parallelToolCalls'],
    value: 'boolean; responses forwards it only with tools; messages sends `disable_parallel_tool_use` as false here where the model has it',
    supportedNames: ['parallel_tool_calls'],
    spellings: { chat: ['parallel_tool_calls'], responses: ['parallel_tool_calls'] },
    learnable: true,
    wireNames: ['parallel_tool_calls'],
    wires: { ...OPENAI_ONLY, anthropic: '`tool_choice.disable_parallel_tool_use`' },
  },
  image_config: {
    fields: ['imageAspectRatio'],
    value: 'aspect_ratio, one of the ratios in the chat schema',
    supportedNames: ['image_config'],
    spellings: { chat: ['image_config'] },
    learnable: true,
    wireNames: ['image_config'],
    wires: { ...OPENAI_ONLY, gemini: '`imageConfig.aspectRatio`' },
  },
  seed: {
    fields: ['seed'],
    value: 'integer (a JS safe integer); kinds without a seed go without it and name it (docs/providers.md)',
    supportedNames: ['seed'],
    spellings: { chat: ['seed'] },
    learnable: true,
    wireNames: ['seed'],
    wires: { ...OPENAI_ONLY, gemini: '`generationConfig.seed`' },
  },
  verbosity: {
    fields: ['verbosity'],
    value: 'low | medium | high (OpenAI GPT-5 output length); kinds without it go without it and name it',
    supportedNames: ['verbosity'],
    spellings: { chat: ['verbosity'], responses: ['text.verbosity'] },
    learnable: true,
    wireNames: ['verbosity'],
    wires: OPENAI_ONLY,
  },
  user: {
    fields: ['user'],
    value: 'string: the end user, for the provider’s abuse monitoring (OpenAI `user`)',
    supportedNames: ['user'],
    spellings: { chat: ['user'], responses: ['user'], messages: ['metadata.user_id'] },
    learnable: true,
    wireNames: ['user', 'metadata.user_id', 'metadata'],
    wires: { ...OPENAI_ONLY, anthropic: '`metadata.user_id`' },
  },
  n: {
    fields: ['n'],
    value: 'integer 1–128; 1 asks for nothing (one choice is the answer anyway); above 1 on a model that does not list `n`: 400',
    supportedNames: ['n'],
    // Only n above 1 asks for something.
    spellings: { chat: [{ path: 'n', present: (value) => typeof value === 'number' && value > 1 }] },
    learnable: false,
    wireNames: ['n', 'candidateCount'],
    // Only OpenAI-wire kinds and unstreamed Gemini (at most 8) answer several choices: routing tries only
    // their providers (400 when the model has none). Every choice's tokens are charged, as the upstream counts them.
    wires: {
      openai: true,
      anthropic: 'refused',
      gemini: '`generationConfig.candidateCount`, n at most 8 and not streamed (else not tried)',
      'bedrock-claude': 'refused',
      bedrock: 'refused',
      simulated: 'refused',
    },
  },
  logprobs: {
    fields: ['logprobs'],
    value: 'boolean; the answer carries each choice’s logprobs as chat `choices[].logprobs` (JSON and stream chunks), responses the output_text part’s `logprobs` (and each `response.output_text.delta`)',
    // Spec §2.6: the catalog never shows (and strips) `logprobs` from a model's list, so the model's
    // `top_logprobs` says it has both (OpenRouter lists the two together).
    supportedNames: ['top_logprobs', 'logprobs'],
    spellings: {
      chat: ['logprobs'],
      // Responses asks for them by naming the output text's logprobs in `include`.
      responses: [{ path: 'include', present: (value) => Array.isArray(value) && value.includes('message.output_text.logprobs') }],
    },
    learnable: true,
    wireNames: ['logprobs', 'responseLogprobs'],
    wires: { ...OPENAI_ONLY, gemini: '`generationConfig.responseLogprobs`; `logprobsResult` converted', simulated: false },
  },
  top_logprobs: {
    fields: ['topLogprobs'],
    value: 'integer 0–20 (chat: with `logprobs: true`, as OpenAI requires; responses: with the `include` entry, else named)',
    supportedNames: ['top_logprobs'],
    // Responses echoes `top_logprobs: 0` as its default: only a count above 0 asks for something there.
    spellings: { chat: ['top_logprobs'], responses: [{ path: 'top_logprobs', present: (value) => typeof value === 'number' && value > 0 }] },
    learnable: true,
    wireNames: ['top_logprobs'],
    wires: { ...OPENAI_ONLY, gemini: '`generationConfig.logprobs`', simulated: false },
  },
  'anthropic-beta': {
    fields: ['anthropicBeta'],
    value: 'the messages request header (comma-separated); values outside ANTHROPIC_BETAS are dropped and named',
    // A header, not a model parameter: every model takes it (no catalog name), the upstream kind decides.
    supportedNames: [],
    spellings: {},
    headers: { messages: 'anthropic-beta' },
    learnable: false,
    wireNames: [],
    wires: {
      openai: false,
      anthropic: 'header `anthropic-beta`',
      gemini: false,
      'bedrock-claude': '`additionalModelRequestFields.anthropic_beta`',
      bedrock: false,
      simulated: false,
    },
  },
} as const satisfies Record<string, ParameterRow>;

/**
 * The `anthropic-beta` values the gateway passes on to Anthropic-wire upstreams (issue 37 item 8): betas
 * that change what Claude does with a request the gateway already understands. Anthropic refuses an
 * unknown value (400), and a beta that changes the wire (files, MCP, code execution) would reach the
 * gateway's converters as shapes they do not read, so anything else is dropped and named. Money
 * first: `context-1m-2025-08-07` is out (Anthropic prices a prompt above 200K tokens higher under it,
 * which the catalog's one input price would not charge), as are betas billed by other units (code
 * execution's container time, web fetches).
 */
export const ANTHROPIC_BETAS: ReadonlySet<string> = new Set([
  'interleaved-thinking-2025-05-14',
  'fine-grained-tool-streaming-2025-05-14',
  'token-efficient-tools-2025-02-19',
  'output-128k-2025-02-19',
  'extended-cache-ttl-2025-04-11',
  'prompt-caching-2024-07-31',
  'effort-2025-11-24',
  'claude-code-20250219',
]);

/** The header's values split: the allowlisted ones (in order, each once), and whether any was left out. */
export function anthropicBetas(header: string): { betas: string[]; droppedSome: boolean } {
  const betas: string[] = [];
  let droppedSome = false;
  for (const raw of header.split(',')) {
    const value = raw.trim();
    if (value === '') continue;
    if (ANTHROPIC_BETAS.has(value)) {
      if (!betas.includes(value)) betas.push(value);
    } else {
      droppedSome = true;
    }
  }
  return { betas, droppedSome };
}

export type CanonicalParameter = keyof typeof PARAMETERS;
export const CANONICAL_PARAMETERS = Object.keys(PARAMETERS) as CanonicalParameter[];

function rowOf(name: string): ParameterRow | undefined {
  return Object.hasOwn(PARAMETERS, name) ? (PARAMETERS as Record<string, ParameterRow>)[name] : undefined;
}

/** Whether a model whose `supported_parameters` are `supported` takes the parameter. */
export function modelTakes(supported: { has(name: string): boolean } | readonly string[], parameter: CanonicalParameter): boolean {
  // No catalog name: not a model's to lack (a header such as `anthropic-beta`).
  if (PARAMETERS[parameter].supportedNames.length === 0) return true;
  const has = Array.isArray(supported) ? (name: string) => supported.includes(name) : (name: string) => (supported as { has(name: string): boolean }).has(name);
  for (const name of PARAMETERS[parameter].supportedNames) if (has(name)) return true;
  return false;
}

function fieldSet(request: ChatRequest, field: keyof ChatRequest): boolean {
  const value = request[field];
  return Array.isArray(value) ? value.length > 0 : value !== undefined;
}

const NONE: readonly CanonicalParameter[] = [];

/** Per wire: the rows it cannot send, with the fields to look at (built once). */
const UNSENT_BY_WIRE: Readonly<Record<UpstreamWire, readonly [CanonicalParameter, readonly (keyof ChatRequest)[]][]>> = Object.fromEntries(
  UPSTREAM_WIRES.map((wire) => [
    wire,
    CANONICAL_PARAMETERS.filter((name) => PARAMETERS[name].wires[wire] === false).map((name) => [name, PARAMETERS[name].fields] as const),
  ]),
) as never;

/**
 * The canonical parameters `request` sets that `wire` has no field for: what a converter reports it
 * could not send. Nothing is allocated when the request sets none of them (the common path).
 */
export function unsentParameters(wire: UpstreamWire, request: ChatRequest): readonly CanonicalParameter[] {
  let names: CanonicalParameter[] | undefined;
  for (const [name, fields] of UNSENT_BY_WIRE[wire]) if (fields.some((field) => fieldSet(request, field))) (names ??= []).push(name);
  return names ?? NONE;
}

/** The canonical fields a learned drop of the parameter clears; undefined for a name no row learns. */
export function learnedFieldsOf(name: string): readonly (keyof ChatRequest)[] | undefined {
  const row = rowOf(name);
  return row?.learnable ? row.fields : undefined;
}

function normalise(name: string): string {
  return name.toLowerCase().replaceAll('_', '');
}

/**
 * Request fields that are the request itself, never a parameter a model may lack, in providers'
 * spellings; with the wire names of the rows that are not learnable. `prompt_cache_key` is the
 * gateway's own (cache affinity) and never sent upstream.
 */
const REQUEST_ITSELF = [
  'model', 'messages', 'contents', 'system', 'systemInstruction', 'stream', 'stream_options', 'generationConfig', 'n', 'candidateCount',
  'prompt_cache_key',
];

const WIRE_NAMES: ReadonlyMap<string, string> = new Map(
  CANONICAL_PARAMETERS.filter((name) => PARAMETERS[name].learnable).flatMap((name) =>
    [name, ...PARAMETERS[name].wireNames].map((wireName) => [normalise(wireName), name] as const),
  ),
);
const NOT_LEARNABLE: ReadonlySet<string> = new Set([
  ...REQUEST_ITSELF,
  ...CANONICAL_PARAMETERS.filter((name) => !PARAMETERS[name].learnable).flatMap((name) => [name, ...PARAMETERS[name].wireNames]),
].map(normalise));

/**
 * The canonical name of a field a provider named in a refusal: a learnable row's name, '' for the
 * request itself (never dropped), or the provider's own name (maybe a key of the request's extra_body).
 */
export function canonicalNameOfWireField(providerName: string): string {
  const key = normalise(providerName);
  const known = WIRE_NAMES.get(key);
  if (known !== undefined) return known;
  return NOT_LEARNABLE.has(key) || providerName.includes('.') ? '' : providerName;
}

/** The names a dialect spells the parameter with (first: the usual one). */
export function spellingsOf(dialect: Dialect, parameter: CanonicalParameter): readonly string[] {
  const spellings = (PARAMETERS[parameter] as ParameterRow).spellings[dialect] ?? [];
  return spellings.map((spelling) => (typeof spelling === 'string' ? spelling : spelling.path));
}

const WIRE_COLUMNS: readonly [string, UpstreamWire][] = [
  ['`openai`, `azure-openai`', 'openai'],
  ['`anthropic`, `vertex` Claude', 'anthropic'],
  ['`gemini`, `vertex` Gemini', 'gemini'],
  ['`bedrock` Claude', 'bedrock-claude'],
  ['`bedrock` others', 'bedrock'],
  ['`simulated`', 'simulated'],
];

function cell(support: WireSupport): string {
  if (support === true) return 'sent';
  if (support === false) return 'dropped and named';
  if (support === 'refused') return 'not tried (400 when no offer can)';
  return `sent: ${support}`;
}

/** docs/providers.md's per-kind parameter table, generated from PARAMETERS (a test compares the two). */
export function parameterTableMarkdown(): string {
  const lines = [
    `| parameter | catalog names | chat | responses | messages | ${WIRE_COLUMNS.map(([title]) => title).join(' | ')} |`,
    `|---|---|---|---|---|${WIRE_COLUMNS.map(() => '---|').join('')}`,
  ];
  for (const name of CANONICAL_PARAMETERS) {
    const row = PARAMETERS[name] as ParameterRow;
    const spelled = (dialect: Dialect) => {
      const names = spellingsOf(dialect, name).map((spelling) => `\`${spelling}\``);
      const header = row.headers?.[dialect];
      if (header !== undefined) names.push(`header \`${header}\``);
      return names.length === 0 ? '—' : names.join(', ');
    };
    const catalogNames = row.supportedNames.length === 0 ? 'any model' : row.supportedNames.map((supported) => `\`${supported}\``).join(', ');
    // The simulated kind sends nothing anywhere: what it takes, it takes.
    const wires = WIRE_COLUMNS.map(([, wire]) => (wire === 'simulated' && row.wires[wire] === true ? 'taken' : cell(row.wires[wire])));
    lines.push(`| \`${name}\` | ${catalogNames} | ${spelled('chat')} | ${spelled('responses')} | ${spelled('messages')} | ${wires.join(' | ')} |`);
  }
  return lines.join('\n');
}

/**
 * The endpoint families' parameters a model may lack (`supported_parameters` names): the edge forwards
 * each only to a model that lists it and names it in `x-gateway-dropped-params` otherwise; routing
 * passes on what the edge forwarded (decided once, at the edge).
 */
export const ENDPOINT_PARAMETERS = {
  dimensions: { family: 'embeddings' },
  quality: { family: 'images' },
  background: { family: 'images' },
} as const;

export type EndpointParameter = keyof typeof ENDPOINT_PARAMETERS;

/** Whether a model whose `supported_parameters` are `supported` takes the endpoint parameter. */
export function modelTakesEndpointParameter(supported: { has(name: string): boolean }, parameter: EndpointParameter): boolean {
  return supported.has(parameter);
}
