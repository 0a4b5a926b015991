import { errors, type GatewayError } from '@gateway/platform';
import { jsonSchemaEngineFor, type JsonSchemaEngine, type ValidateFunction } from '@gateway/platform/json-schema';
import type { ChatMessage, ChatRequest, ResponseFormat } from '@gateway/proto';
import { ProviderError, type AdapterChatRequest, type AdapterChatResult, type AdapterEmbedRequest, type AdapterEmbedResult, type AdapterStreamPart, type AttemptSignal, type ProviderAdapterV1 } from './provider-adapter.js';

/*
 * response_format (spec §4.8). `json_object` must work without the word "json" in the prompt (OpenAI
 * refuses it otherwise), so adapters add an instruction. `json_schema` goes natively to providers
 * that support it; for the others the schema is put into an instruction and the answer is checked
 * against it here (ajv), so a non-conforming answer fails over like any broken answer.
 */

export const JSON_OBJECT_INSTRUCTION = 'Respond with a single valid JSON object and nothing else.';

/** Longest schema text quoted into an instruction: a prompt has better uses for its tokens. */
const MAX_INSTRUCTED_SCHEMA_CHARACTERS = 32_000;
/** Compiled validators kept (LRU): the same few schemas tend to repeat. */
const MAX_CACHED_VALIDATORS = 256;

function textOf(message: ChatMessage): string {
  return message.content.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).join(' ');
}

/** OpenAI's rule: json_object needs the word "json" somewhere in the messages. */
export function mentionsJson(messages: readonly ChatMessage[]): boolean {
  return messages.some((message) => /json/i.test(textOf(message)));
}

/** The instruction a provider needs for this format, or undefined when none is needed. */
export function structuredOutputInstruction(format: ResponseFormat | undefined, messages: readonly ChatMessage[], nativeJsonSchema: boolean): string | undefined {
  if (!format) return undefined;
  if (format.type === 'json_object') return mentionsJson(messages) ? undefined : JSON_OBJECT_INSTRUCTION;
  if (format.type === 'json_schema' && !nativeJsonSchema) {
    const schema = format.schema.length <= MAX_INSTRUCTED_SCHEMA_CHARACTERS ? format.schema : `${format.schema.slice(0, MAX_INSTRUCTED_SCHEMA_CHARACTERS)}…`;
    return `Respond with a single JSON object that conforms to this JSON Schema${format.schemaName ? ` (named ${format.schemaName})` : ''}, and nothing else:\n${schema}`;
  }
  return undefined;
}

/** Messages with a system instruction in front (the caller's own system message, if any, follows it). */
export function withInstruction(messages: readonly ChatMessage[], instruction: string | undefined): ChatMessage[] {
  if (instruction === undefined) return [...messages];
  return [{ role: 'system', content: [{ part: { $case: 'text', value: instruction } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }, ...messages];
}

/** The field a client's schema came in, as the chat-completions dialect (the one that carries json_schema) names it. */
const SCHEMA_PARAM = 'body.response_format.json_schema.schema';
/** Characters of ajv's complaint quoted back: it names paths inside the client's schema. */
const MAX_COMPLAINT_CHARACTERS = 512;

/**
 * The client's schema cannot be used: their 400 (the edge names the field), thrown as a typed error so
 * the router neither fails over nor counts it against the provider. The edge already refuses schemas
 * that fail their meta-schema; what reaches here is what only compiling finds (a `$ref` to nowhere).
 */
function invalidSchema(detail: string): GatewayError {
  const complaint = detail.length > MAX_COMPLAINT_CHARACTERS ? `${detail.slice(0, MAX_COMPLAINT_CHARACTERS)}…` : detail;
  return errors.invalidRequest(`${SCHEMA_PARAM}: not a usable JSON Schema: ${complaint}`, SCHEMA_PARAM, 'invalid_json_schema');
}

/**
 * A provider that builds its answer from the schema itself (the simulated one) could not build one that
 * satisfies it (`minLength` past its bound, contradictory `allOf`, a top-level non-object): the client's
 * 400, not a broken answer to fail over from (issue 29: 503 after every offer was tried).
 */
export function unsatisfiableSchema(detail: string): GatewayError {
  const complaint = detail.length > MAX_COMPLAINT_CHARACTERS ? `${detail.slice(0, MAX_COMPLAINT_CHARACTERS)}…` : detail;
  return errors.invalidRequest(`${SCHEMA_PARAM}: this provider cannot produce an answer that satisfies the schema (${complaint}).`, SCHEMA_PARAM, 'unsatisfiable_json_schema');
}

interface CompiledSchema {
  validate: ValidateFunction;
  engine: JsonSchemaEngine;
  /** The object ajv compiled, which its own cache holds by identity until removed. */
  compiled: object;
}

const validators = new Map<string, CompiledSchema>();

function compile(schemaText: string): ValidateFunction {
  const cached = validators.get(schemaText);
  if (cached) {
    validators.delete(schemaText);
    validators.set(schemaText, cached);
    return cached.validate;
  }
  let schema: unknown;
  try {
    schema = JSON.parse(schemaText);
  } catch {
    throw invalidSchema('not JSON');
  }
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) throw invalidSchema('not a JSON object');
  // One schema object compiles once per engine; strip $id so two requests with the same $id do not clash.
  const { $id: _ignored, ...withoutId } = schema as Record<string, unknown>;
  const engine = jsonSchemaEngineFor(withoutId);
  let validate: ValidateFunction;
  try {
    validate = engine.compile(withoutId);
  } catch (error) {
    // A failed compile may leave the schema registered; it must not stay.
    engine.removeSchema(withoutId);
    throw invalidSchema(error instanceof Error ? error.message : String(error));
  }
  validators.set(schemaText, { validate, engine, compiled: withoutId });
  if (validators.size > MAX_CACHED_VALIDATORS) {
    const oldest = validators.keys().next().value as string;
    // ajv keeps every schema it compiled (a Map keyed by the schema object): without this, each distinct
    // schema a client sends would stay in memory for the life of the process.
    const evicted = validators.get(oldest)!;
    evicted.engine.removeSchema(evicted.compiled);
    validators.delete(oldest);
  }
  return validate;
}

/** Why `content` does not satisfy the format, or undefined when it does. */
export function structuredOutputViolation(format: ResponseFormat | undefined, content: string): string | undefined {
  if (!format || (format.type !== 'json_object' && format.type !== 'json_schema')) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(content);
  } catch {
    return 'the answer is not valid JSON';
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'the answer is not a JSON object';
  if (format.type === 'json_object' || format.schema === '') return undefined;
  const validate = compile(format.schema);
  if (validate(value)) return undefined;
  const first = validate.errors?.[0];
  return `the answer does not match the schema${first ? `: ${first.instancePath || '/'} ${first.message ?? ''}` : ''}`.trim();
}

/** Finish reasons whose content is expected to be the complete JSON answer. */
function expectsCompleteAnswer(finishReason: string): boolean {
  return finishReason === 'stop' || finishReason === '';
}

function needsCheck(request: ChatRequest): boolean {
  const type = request.responseFormat?.type;
  return type === 'json_object' || type === 'json_schema';
}

/**
 * Wraps an adapter whose provider has no native JSON modes: the request gets the instruction, the
 * answer is checked. A non-streamed answer that fails the check is a broken answer (the router fails
 * over). A stream is checked when it ends — its content has already reached the caller, so a failure
 * ends the stream with an error instead of a clean finish.
 */
export class InstructedStructuredOutput implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;

  /** The capabilities beyond chat pass through untouched, and only when the wrapped adapter has them. */
  readonly embed: ProviderAdapterV1['embed'];
  readonly moderate: ProviderAdapterV1['moderate'];
  readonly generateImages: ProviderAdapterV1['generateImages'];
  readonly editImages: ProviderAdapterV1['editImages'];
  readonly speak: ProviderAdapterV1['speak'];
  readonly transcribe: ProviderAdapterV1['transcribe'];

  constructor(private readonly inner: ProviderAdapterV1) {
    this.embed = inner.embed?.bind(inner);
    this.moderate = inner.moderate?.bind(inner);
    this.generateImages = inner.generateImages?.bind(inner);
    this.editImages = inner.editImages?.bind(inner);
    this.speak = inner.speak?.bind(inner);
    this.transcribe = inner.transcribe?.bind(inner);
  }

  get providerId() {
    return this.inner.providerId;
  }

  get kind() {
    return this.inner.kind;
  }

  private instructed(request: AdapterChatRequest): AdapterChatRequest {
    if (!needsCheck(request.chat)) return request;
    // Fail before the provider is called when the schema itself is unusable.
    if (request.chat.responseFormat?.type === 'json_schema' && request.chat.responseFormat.schema !== '') compile(request.chat.responseFormat.schema);
    const instruction = structuredOutputInstruction(request.chat.responseFormat, request.chat.messages, false);
    return { ...request, chat: { ...request.chat, messages: withInstruction(request.chat.messages, instruction) } };
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    const result = await this.inner.chat(this.instructed(request), signal);
    if (!needsCheck(request.chat)) return result;
    for (const choice of result.choices) {
      const message = choice.message;
      if (!message || message.toolCalls.length > 0 || !expectsCompleteAnswer(choice.finishReason)) continue;
      const violation = structuredOutputViolation(request.chat.responseFormat, message.content);
      if (violation) throw new ProviderError('connection', `malformed answer for response_format ${request.chat.responseFormat?.type}: ${violation}`);
    }
    return result;
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    const check = needsCheck(request.chat);
    const content = new Map<number, string>();
    const finish = new Map<number, string>();
    const withCalls = new Set<number>();
    for await (const part of this.inner.chatStream(this.instructed(request), signal)) {
      if (check && part.type === 'delta') {
        const { choiceIndex } = part.delta;
        if (part.delta.content) content.set(choiceIndex, (content.get(choiceIndex) ?? '') + part.delta.content);
        if (part.delta.toolCalls.length > 0) withCalls.add(choiceIndex);
        if (part.delta.finishReason) finish.set(choiceIndex, part.delta.finishReason);
      }
      yield part;
    }
    if (!check) return;
    for (const [choiceIndex, text] of content) {
      if (withCalls.has(choiceIndex) || !expectsCompleteAnswer(finish.get(choiceIndex) ?? '')) continue;
      const violation = structuredOutputViolation(request.chat.responseFormat, text);
      if (violation) throw new ProviderError('connection', `malformed answer for response_format ${request.chat.responseFormat?.type}: ${violation}`);
    }
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
