import { unsentParameters } from '@gateway/platform';
import type { ChatMessage, ChatRequest, ContentPart, FilePart, ImagePart, ToolCall } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import type {
  GeminiContent,
  GeminiFunctionDeclaration,
  GeminiGenerationConfig,
  GeminiPart,
  GeminiRequestBody,
  GeminiThinkingConfig,
  GeminiToolConfig,
} from './gemini-api-types.js';
import { readSignatures, SKIP_SIGNATURE_VALIDATOR } from './gemini-thought-signatures.js';
import { GeminiToolNames } from './gemini-tool-names.js';

export interface GeminiConversionOptions {
  /** The adapter's provider: reasoning (signatures) issued by any other provider never goes out (spec §1). */
  providerId: string;
  /** The model the request goes to (Pro models cannot turn thinking off). */
  upstreamModel?: string;
}

/** Thinking budget per `reasoning_effort` (Gemini 2.5 budgets; Gemini 3 maps a budget onto its levels). */
export const THINKING_BUDGET_BY_EFFORT: Readonly<Record<string, number>> = {
  none: 0,
  minimal: 512,
  low: 1_024,
  medium: 8_192,
  high: 24_576,
  // Flash models refuse budgets above 24576.
  xhigh: 24_576,
};

/** The smallest budget of the models that always think (Pro): what `reasoning_effort: none` gets there. */
export const PRO_MIN_THINKING_BUDGET = 128;
const ALWAYS_THINKS = /-pro\b/;
/** The largest budgets the models take: Flash models 24576, Pro models 32768. */
export const MAX_THINKING_BUDGET = 24_576;
export const PRO_MAX_THINKING_BUDGET = 32_768;

/** Gemini takes at most this many stop sequences. */
const MAX_STOP_SEQUENCES = 5;

function rejected(message: string): ProviderError {
  return new ProviderError('rejected', message, 400);
}

const IMAGE_TYPES_BY_EXTENSION: Readonly<Record<string, string>> = {
  png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', heic: 'image/heic', heif: 'image/heif',
};

/** The media type of an image URL by its extension (fileData needs one); JPEG when it says nothing. */
function imageTypeOfUrl(url: string): string {
  const extension = /\.([a-z0-9]+)(?:[?#]|$)/i.exec(url)?.[1]?.toLowerCase();
  return (extension && IMAGE_TYPES_BY_EXTENSION[extension]) || 'image/jpeg';
}

function imagePart(image: ImagePart, where: string): GeminiPart {
  const url = image.url;
  if (url.startsWith('data:')) {
    const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
    if (!match) throw rejected(`${where}: only base64 data: URLs can be sent as images to this provider`);
    return { inlineData: { mimeType: match[1]!, data: match[2]! } };
  }
  return { fileData: { mimeType: imageTypeOfUrl(url), fileUri: url } };
}

function filePart(file: FilePart, where: string): GeminiPart {
  const mimeType = file.mediaType || 'application/pdf';
  if (file.data.length > 0) return { inlineData: { mimeType, data: Buffer.from(file.data).toString('base64') } };
  if (file.url) return { fileData: { mimeType, fileUri: file.url } };
  throw rejected(`${where}: a file needs data or a url`);
}

const AUDIO_TYPES: Readonly<Record<string, string>> = { wav: 'audio/wav', mp3: 'audio/mp3' };

/** Text, image, file and audio parts of a user turn (or of a tool result) in the client's order. */
function userParts(parts: readonly ContentPart[], where: string): GeminiPart[] {
  const converted: GeminiPart[] = [];
  parts.forEach((part, index) => {
    const value = part.part;
    const at = `${where}.content[${index}]`;
    switch (value?.$case) {
      case 'text':
        if (value.value !== '') converted.push({ text: value.value });
        break;
      case 'image':
        converted.push(imagePart(value.value, at));
        break;
      case 'file':
        converted.push(filePart(value.value, at));
        break;
      case 'audio': {
        const mimeType = AUDIO_TYPES[value.value.format];
        if (!mimeType) throw rejected(`${at}: audio format ${value.value.format} cannot be sent to this provider`);
        converted.push({ inlineData: { mimeType, data: Buffer.from(value.value.data).toString('base64') } });
        break;
      }
      default:
        break;
    }
  });
  return converted;
}

function textOf(message: ChatMessage): string {
  return message.content.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).filter((text) => text !== '').join('\n');
}

function isSystemRole(role: string): boolean {
  return role === 'system' || role === 'developer';
}

/**
 * A system or developer message in the middle of a conversation (spec §4.10): Gemini has one system
 * instruction, before the conversation. The later instruction goes into the user turn at its place,
 * wrapped so the model reads it as an instruction rather than something the user said.
 */
export function systemNote(text: string): string {
  return `<system>\n${text}\n</system>`;
}

/** JSON text as an object; undefined when it is not one. */
function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Tool arguments as Gemini's `args` object. Not a JSON object (a cut-off answer of another model): `{}`. */
function callArgs(argumentsText: string): Record<string, unknown> {
  return argumentsText.trim() === '' ? {} : (parseObject(argumentsText) ?? {});
}

/**
 * A tool result as `functionResponse.response`, which the API requires to be a JSON object. Following
 * Google's convention, a result that is not an object goes under `output` (under `error` when the tool
 * reported a failure); an object result is sent as it is, or under `error` for a failure.
 */
export function functionResponseOf(resultText: string, isError: boolean): Record<string, unknown> {
  let value: unknown = resultText;
  if (resultText.trim() !== '') {
    try {
      value = JSON.parse(resultText);
    } catch {
      value = resultText;
    }
  }
  if (isError) return { error: value };
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : { output: value };
}

/** A call's own signature (chat clients echo it on the tool call) when this provider issued it. */
function ownSignature(call: ToolCall, providerId: string): string | undefined {
  return call.signature && call.signatureProviderId === providerId ? call.signature : undefined;
}

/**
 * The model turn of one assistant message: its own signed thoughts, its text, its calls, each signature
 * where it came from. A call's signature is the call's own one when this provider issued it, else the
 * reasoning record's; a turn whose calls have neither gets Google's skip value on its first call.
 */
function modelParts(message: ChatMessage, providerId: string, names: GeminiToolNames): GeminiPart[] {
  const thoughts: GeminiPart[] = [];
  let textSignature: string | undefined;
  const callSignatures: string[] = [];
  for (const part of message.reasoning) {
    // Only what this provider issued goes back (the router strips the rest already; this is the last line).
    if (part.providerId !== providerId || part.signature === '') continue;
    let text = part.text;
    for (const { place, signature } of readSignatures(part.signature)) {
      // The reasoning's text goes with the first thought signature of the part; any further one stands alone.
      if (place.kind === 'thought') thoughts.push({ text, thought: true, thoughtSignature: signature });
      else if (place.kind === 'text') textSignature = signature;
      else callSignatures[place.index] = signature;
      if (place.kind === 'thought') text = '';
    }
  }
  const parts: GeminiPart[] = thoughts;
  for (const content of message.content) {
    if (content.part?.$case === 'text' && content.part.value !== '') parts.push({ text: content.part.value });
  }
  if (textSignature !== undefined) {
    const last = parts.at(-1);
    if (last && last.text !== undefined && !last.thought) last.thoughtSignature = textSignature;
    else parts.push({ text: '', thoughtSignature: textSignature });
  }
  const anySigned = message.toolCalls.some((call, index) => ownSignature(call, providerId) !== undefined || callSignatures[index] !== undefined);
  message.toolCalls.forEach((call, index) => {
    const part: GeminiPart = { functionCall: { name: names.upstream(call.name), args: callArgs(call.arguments) } };
    const signature = ownSignature(call, providerId) ?? callSignatures[index] ?? (index === 0 && !anySigned ? SKIP_SIGNATURE_VALIDATOR : undefined);
    if (signature !== undefined) part.thoughtSignature = signature;
    parts.push(part);
  });
  return parts;
}

/** The conversation as Gemini contents (consecutive turns of one role merged), plus the system instruction. */
function convertMessages(messages: readonly ChatMessage[], providerId: string, names: GeminiToolNames) {
  const system: string[] = [];
  let index = 0;
  for (; index < messages.length && isSystemRole(messages[index]!.role); index++) {
    const text = textOf(messages[index]!);
    if (text) system.push(text);
  }
  const contents: GeminiContent[] = [];
  const turnFor = (role: GeminiContent['role']): GeminiPart[] => {
    const last = contents.at(-1);
    if (last && last.role === role) return last.parts;
    const turn: GeminiContent = { role, parts: [] };
    contents.push(turn);
    return turn.parts;
  };
  // Gemini answers a function response by the function's name: the name of each call id seen so far.
  const callNames = new Map<string, string>();
  for (; index < messages.length; index++) {
    const message = messages[index]!;
    const where = `messages[${index}]`;
    if (isSystemRole(message.role)) {
      const text = textOf(message);
      if (text) turnFor('user').push({ text: systemNote(text) });
    } else if (message.role === 'tool') {
      const name = callNames.get(message.toolCallId) ?? message.name;
      if (!name) throw rejected(`${where}: tool result for call ${message.toolCallId}, which no assistant message made`);
      const results = message.content.filter((part) => part.part?.$case === 'text');
      const resultText = results.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).join('');
      const parts = turnFor('user');
      parts.push({ functionResponse: { name: names.upstream(name), response: functionResponseOf(resultText, message.isError) } });
      // Images or files a tool returned follow its response in the same turn.
      const media = message.content.filter((part) => part.part?.$case !== 'text');
      if (media.length > 0) parts.push(...userParts(media, where));
    } else if (message.role === 'assistant') {
      for (const call of message.toolCalls) callNames.set(call.id, call.name);
      const parts = modelParts(message, providerId, names);
      if (parts.length > 0) turnFor('model').push(...parts);
    } else {
      const parts = userParts(message.content, where);
      if (parts.length > 0) turnFor('user').push(...parts);
    }
  }
  // Only instructions and no conversation: Gemini needs contents, so the instructions are the user turn.
  if (contents.length === 0 && system.length > 0) return { system: [], contents: [{ role: 'user', parts: [{ text: system.join('\n\n') }] }] as GeminiContent[] };
  return { system, contents };
}

function parseSchema(text: string, where: string): Record<string, unknown> | undefined {
  if (text.trim() === '') return undefined;
  const schema = parseObject(text);
  if (!schema) throw rejected(`${where} is not a JSON object`);
  return schema;
}

function toolConfig(request: ChatRequest, names: GeminiToolNames): GeminiToolConfig | undefined {
  const choice = request.toolChoice;
  switch (choice?.mode) {
    case 'none':
      return { functionCallingConfig: { mode: 'NONE' } };
    case 'required':
      return { functionCallingConfig: { mode: 'ANY' } };
    case 'tool':
      return { functionCallingConfig: { mode: 'ANY', allowedFunctionNames: [names.upstream(choice.toolName)] } };
    case 'auto':
      return { functionCallingConfig: { mode: 'AUTO' } };
    default:
      return undefined;
  }
}

function thinkingConfig(request: ChatRequest, model: string): GeminiThinkingConfig | undefined {
  let budget: number | undefined;
  if (request.thinkingBudgetTokens !== undefined) budget = request.thinkingBudgetTokens;
  else if (request.reasoningEffort !== undefined) budget = THINKING_BUDGET_BY_EFFORT[request.reasoningEffort];
  if (budget === undefined) return request.reasoningSummary !== undefined ? { includeThoughts: true } : undefined;
  // Thought summaries come back as reasoning whenever the caller asked for thinking. Pro models refuse
  // a budget of 0 ("this model only works in thinking mode"): they get their smallest one instead.
  // Budgets above the model's maximum are refused: they are sent as that maximum.
  if (budget > 0) return { includeThoughts: true, thinkingBudget: Math.min(budget, ALWAYS_THINKS.test(model) ? PRO_MAX_THINKING_BUDGET : MAX_THINKING_BUDGET) };
  return { thinkingBudget: ALWAYS_THINKS.test(model) ? PRO_MIN_THINKING_BUDGET : 0 };
}

function generationConfig(request: ChatRequest, model: string): GeminiGenerationConfig | undefined {
  const config: GeminiGenerationConfig = {};
  if (request.temperature !== undefined) config.temperature = request.temperature;
  if (request.topP !== undefined) config.topP = request.topP;
  if (request.topK !== undefined) config.topK = request.topK;
  if (request.maxOutputTokens !== undefined) config.maxOutputTokens = request.maxOutputTokens;
  if (request.stop.length > 0) config.stopSequences = request.stop.slice(0, MAX_STOP_SEQUENCES);
  if (request.presencePenalty !== undefined) config.presencePenalty = request.presencePenalty;
  if (request.frequencyPenalty !== undefined) config.frequencyPenalty = request.frequencyPenalty;
  // Chat `n` above 1: that many candidates (routing sends no stream here: streamGenerateContent answers one).
  if (request.n !== undefined && request.n > 1) config.candidateCount = request.n;
  // Logprobs: the chosen tokens' (responseLogprobs), and the top ones per step only alongside them.
  if (request.logprobs === true) {
    config.responseLogprobs = true;
    if (request.topLogprobs !== undefined) config.logprobs = request.topLogprobs;
  }
  // generationConfig.seed is an int32: a larger seed is another request to Gemini (400), so it goes as the client sent it.
  if (request.seed !== undefined) config.seed = Number(request.seed);
  const format = request.responseFormat;
  if (format?.type === 'json_object') config.responseMimeType = 'application/json';
  else if (format?.type === 'json_schema') {
    config.responseMimeType = 'application/json';
    const schema = parseSchema(format.schema, 'response_format.json_schema.schema');
    if (schema) config.responseJsonSchema = schema;
  }
  if (request.imageAspectRatio !== undefined) config.imageConfig = { aspectRatio: request.imageAspectRatio };
  const thinking = thinkingConfig(request, model);
  if (thinking) config.thinkingConfig = thinking;
  return Object.keys(config).length > 0 ? config : undefined;
}

/**
 * Canonical request -> Gemini generateContent body. Leading system and developer messages become
 * `systemInstruction`; later ones a wrapped note in the user turn at their place; tool definitions
 * `functionDeclarations` with `parametersJsonSchema` (full JSON Schema; `parameters` would refuse
 * keywords such as additionalProperties); tool results `functionResponse` parts named after their call;
 * JSON modes `responseMimeType` (+ `responseJsonSchema`); thinking `thinkingConfig`. Consecutive
 * messages of one role share one content. Gemini has no switch for parallel calls: disable_parallel is
 * not sent.
 */
export interface GeminiConversion {
  body: GeminiRequestBody;
  /** Turns the function names of the answer back into the caller's tool names. */
  names: GeminiToolNames;
  /**
   * The canonical parameters the request set that this body goes without (libs/platform PARAMETERS
   * names): what the wire has no field for, and what it takes only with certain values.
   */
  unsent: readonly string[];
}

export function convertToGeminiRequest(request: ChatRequest, options: GeminiConversionOptions): GeminiConversion {
  const names = new GeminiToolNames();
  const { system, contents } = convertMessages(request.messages, options.providerId, names);
  const body: GeminiRequestBody = { contents };
  if (system.length > 0) body.systemInstruction = { parts: system.map((text) => ({ text })) };
  if (request.tools.length > 0) {
    const declarations = request.tools.map((tool, index): GeminiFunctionDeclaration => {
      const declaration: GeminiFunctionDeclaration = { name: names.upstream(tool.name) };
      if (tool.description) declaration.description = tool.description;
      const schema = parseSchema(tool.parameters, `tools[${index}].parameters`);
      if (schema) declaration.parametersJsonSchema = schema;
      return declaration;
    });
    body.tools = [{ functionDeclarations: declarations }];
    const config = toolConfig(request, names);
    if (config) body.toolConfig = config;
  }
  const generation = generationConfig(request, options.upstreamModel ?? '');
  if (generation) body.generationConfig = generation;
  if (request.extraBody !== undefined) {
    const extra = parseObject(request.extraBody);
    if (!extra) throw rejected('extra_body is not a JSON object');
    for (const [field, value] of Object.entries(extra)) if (!(field in body)) body[field] = value;
  }
  let unsent = unsentParameters('gemini', request);
  // Gemini takes at most MAX_STOP_SEQUENCES: the first go, and the rest is named.
  if (request.stop.length > MAX_STOP_SEQUENCES) unsent = [...unsent, 'stop'];
  // Top logprobs without the logprobs themselves: Gemini refuses `logprobs` without responseLogprobs.
  if (request.topLogprobs !== undefined && request.logprobs !== true) unsent = [...unsent, 'top_logprobs'];
  return { body, names, unsent };
}
