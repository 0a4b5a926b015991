import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

// Request checks of the fake Gemini API (fake-gemini-upstream.ts); not part of the package's exports.
//
// Field names and shapes follow the official SDK googleapis/js-genai, read at commit 6e9b35c (Aug 2026):
// src/types.ts (Content, Part, Blob, FileData, FunctionCall, FunctionResponse, FunctionDeclaration,
// Schema, Tool, ToolConfig, FunctionCallingConfig, GenerationConfig, ThinkingConfig) and
// src/converters/_models_converters.ts, whose Gemini-API converters (partToMldev,
// generateContentConfigToMldev, toolToMldev) list the fields each message takes and refuse
// `displayName` on Blob and FileData and `partialArgs` / `willContinue` on FunctionCall. The error texts
// are the API's own wording as Google's clients report them (unknown fields, Struct values, function
// call/response pairing, missing thought signatures on Gemini 3, invalid keys).

export class InvalidGeminiRequest extends Error {
  constructor(message: string, readonly status = 400, readonly rpcStatus = 'INVALID_ARGUMENT') {
    super(message);
  }
}

/** Signatures Google documents for function calls it did not sign (a trace from another model). */
export const SKIP_SIGNATURES = new Set(['skip_thought_signature_validator', 'context_engineering_is_the_way_to_go']);

export interface ThoughtSigner {
  /** A fresh signature (base64) this instance accepts back. */
  sign(): string;
  verify(signature: string): boolean;
}

/** Signatures that are opaque base64 but checkable: 12 random bytes and their MAC under a per-instance key. */
export function createThoughtSigner(): ThoughtSigner {
  const key = randomBytes(32);
  const mac = (nonce: Buffer) => createHmac('sha256', key).update(nonce).digest().subarray(0, 20);
  return {
    sign() {
      const nonce = randomBytes(12);
      return Buffer.concat([nonce, mac(nonce)]).toString('base64');
    },
    verify(signature) {
      if (!/^[A-Za-z0-9+/]+={0,2}$/.test(signature)) return false;
      const bytes = Buffer.from(signature, 'base64');
      if (bytes.length !== 32) return false;
      return timingSafeEqual(bytes.subarray(12), mac(bytes.subarray(0, 12)));
    },
  };
}

/** Proto JSON accepts lowerCamel and the original snake_case names: both map onto one name here. */
function camel(name: string): string {
  return name.replace(/_([a-z])/g, (_match, letter: string) => letter.toUpperCase());
}

function snake(path: string): string {
  return path.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

const isObject = (value: unknown): value is Record<string, any> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Refuses a field the message type does not have, as the API does. */
function knownFields(value: unknown, fields: ReadonlySet<string>, where: string): Record<string, any> {
  if (!isObject(value)) throw new InvalidGeminiRequest(`Invalid value at '${snake(where)}', expected an object`);
  for (const name of Object.keys(value)) {
    if (!fields.has(camel(name))) {
      throw new InvalidGeminiRequest(`Invalid JSON payload received. Unknown name "${name}" at '${snake(where)}': Cannot find field.`);
    }
  }
  // Read through camelCase names from here on.
  const read: Record<string, any> = {};
  for (const [name, field] of Object.entries(value)) read[camel(name)] = field;
  return read;
}

const fields = (...names: string[]) => new Set(names);
const REQUEST = fields('contents', 'tools', 'toolConfig', 'safetySettings', 'systemInstruction', 'generationConfig', 'cachedContent', 'serviceTier');
const CONTENT = fields('role', 'parts');
const PART = fields(
  'text', 'thought', 'thoughtSignature', 'inlineData', 'fileData', 'functionCall', 'functionResponse', 'executableCode',
  'codeExecutionResult', 'videoMetadata', 'mediaResolution', 'partMetadata', 'toolCall', 'toolResponse',
);
const PART_DATA = ['text', 'inlineData', 'fileData', 'functionCall', 'functionResponse', 'executableCode', 'codeExecutionResult', 'toolCall', 'toolResponse'];
const BLOB = fields('mimeType', 'data');
const FILE_DATA = fields('mimeType', 'fileUri');
const FUNCTION_CALL = fields('id', 'name', 'args');
const FUNCTION_RESPONSE = fields('id', 'name', 'response', 'parts', 'willContinue', 'scheduling');
const TOOL = fields('functionDeclarations', 'googleSearch', 'googleSearchRetrieval', 'codeExecution', 'urlContext', 'fileSearch', 'googleMaps', 'computerUse');
const DECLARATION = fields('name', 'description', 'behavior', 'parameters', 'parametersJsonSchema', 'response', 'responseJsonSchema');
/** Google's OpenAPI subset: `parameters` takes these keywords and nothing else of JSON Schema. */
const SCHEMA = fields(
  'type', 'format', 'title', 'description', 'nullable', 'enum', 'maxItems', 'minItems', 'properties', 'required', 'minProperties',
  'maxProperties', 'minLength', 'maxLength', 'pattern', 'example', 'anyOf', 'propertyOrdering', 'default', 'items', 'minimum', 'maximum',
);
const TOOL_CONFIG = fields('functionCallingConfig', 'retrievalConfig', 'includeServerSideToolInvocations');
const FUNCTION_CALLING_CONFIG = fields('mode', 'allowedFunctionNames', 'streamFunctionCallArguments');
const MODES = fields('MODE_UNSPECIFIED', 'AUTO', 'ANY', 'NONE', 'VALIDATED');
const GENERATION_CONFIG = fields(
  'stopSequences', 'responseMimeType', 'responseSchema', 'responseJsonSchema', 'responseModalities', 'candidateCount', 'maxOutputTokens',
  'temperature', 'topP', 'topK', 'seed', 'presencePenalty', 'frequencyPenalty', 'responseLogprobs', 'logprobs', 'enableEnhancedCivicAnswers',
  'speechConfig', 'thinkingConfig', 'mediaResolution', 'imageConfig',
);
const THINKING_CONFIG = fields('includeThoughts', 'thinkingBudget', 'thinkingLevel');
const MIME_TYPES = fields('text/plain', 'application/json', 'text/x.enum');
const IMAGE_CONFIG = fields('aspectRatio', 'imageSize');
const ASPECT_RATIOS = fields('1:1', '2:3', '3:2', '3:4', '4:3', '4:5', '5:4', '9:16', '16:9', '21:9');

function checkSchema(schema: unknown, where: string): void {
  const read = knownFields(schema, SCHEMA, where);
  if (isObject(read.properties)) for (const [name, property] of Object.entries(read.properties)) checkSchema(property, `${where}.properties[${name}].value`);
  if (read.items !== undefined) checkSchema(read.items, `${where}.items`);
  if (Array.isArray(read.anyOf)) read.anyOf.forEach((option: unknown, index: number) => checkSchema(option, `${where}.anyOf[${index}]`));
}

export interface GeminiValidationContext {
  /** The model of the URL (`gemini-3-pro-preview`, ...): Gemini 3 models insist on function-call signatures. */
  model: string;
  signer: ThoughtSigner;
  /** streamGenerateContent: one candidate only. */
  stream?: boolean;
}

/**
 * Most candidates one generateContent answers (Vertex AI's documented range for candidateCount is 1–8;
 * the Gemini API documents no bound, so the fake holds both to Vertex's).
 */
export const MAX_CANDIDATES = 8;
/** `generationConfig.logprobs`: the top candidates per step, 0–20, and only with responseLogprobs. */
export const MAX_TOP_LOGPROBS = 20;

function checkSignature(signature: unknown, where: string, signer: ThoughtSigner): void {
  if (typeof signature !== 'string' || signature === '') throw new InvalidGeminiRequest(`Invalid value at '${snake(where)}' (TYPE_BYTES)`);
  if (!SKIP_SIGNATURES.has(signature) && !signer.verify(signature)) throw new InvalidGeminiRequest('Corrupted thought signature.');
}

/** One content's parts; returns how many function calls and responses it holds. */
function checkParts(content: Record<string, any>, where: string, context: GeminiValidationContext) {
  if (!Array.isArray(content.parts) || content.parts.length === 0) throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(where)}.parts: contents.parts must not be empty.`);
  let calls = 0;
  let responses = 0;
  let firstCallSigned: boolean | undefined;
  content.parts.forEach((raw: unknown, index: number) => {
    const at = `${where}.parts[${index}]`;
    const part = knownFields(raw, PART, at);
    const data = PART_DATA.filter((name) => part[name] !== undefined);
    if (data.length === 0) throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(at)}.data: required oneof field 'data' must have one initialized field`);
    if (data.length > 1) throw new InvalidGeminiRequest(`Invalid value at '${snake(at)}': oneof field 'data' is already set. Cannot set '${data[1]}'`);
    if (part.text !== undefined && typeof part.text !== 'string') throw new InvalidGeminiRequest(`Invalid value at '${snake(at)}.text' (TYPE_STRING)`);
    if (part.thoughtSignature !== undefined) checkSignature(part.thoughtSignature, `${at}.thoughtSignature`, context.signer);
    if (part.inlineData !== undefined) {
      const blob = knownFields(part.inlineData, BLOB, `${at}.inlineData`);
      if (typeof blob.mimeType !== 'string' || blob.mimeType === '') throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(at)}.inline_data.mime_type: required field is not set`);
      if (typeof blob.data !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(blob.data)) throw new InvalidGeminiRequest(`Invalid value at '${snake(at)}.inline_data.data' (TYPE_BYTES), Base64 decoding failed`);
    }
    if (part.fileData !== undefined) {
      const file = knownFields(part.fileData, FILE_DATA, `${at}.fileData`);
      if (typeof file.fileUri !== 'string' || file.fileUri === '') throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(at)}.file_data.file_uri: required field is not set`);
    }
    if (part.functionCall !== undefined) {
      const call = knownFields(part.functionCall, FUNCTION_CALL, `${at}.functionCall`);
      if (typeof call.name !== 'string' || call.name === '') throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(at)}.function_call.name: Name cannot be empty.`);
      if (call.args !== undefined && !isObject(call.args)) {
        throw new InvalidGeminiRequest(`Invalid value at '${snake(at)}.function_call.args' (type.googleapis.com/google.protobuf.Struct), ${JSON.stringify(call.args)}`);
      }
      if (calls === 0) firstCallSigned = part.thoughtSignature !== undefined;
      calls++;
    }
    if (part.functionResponse !== undefined) {
      const response = knownFields(part.functionResponse, FUNCTION_RESPONSE, `${at}.functionResponse`);
      if (typeof response.name !== 'string' || response.name === '') throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(at)}.function_response.name: Name cannot be empty.`);
      if (!isObject(response.response)) {
        throw new InvalidGeminiRequest(`Invalid value at '${snake(at)}.function_response.response' (type.googleapis.com/google.protobuf.Struct), ${JSON.stringify(response.response)}`);
      }
      responses++;
    }
  });
  return { calls, responses, firstCallSigned };
}

function checkContents(contents: unknown, context: GeminiValidationContext): void {
  if (!Array.isArray(contents) || contents.length === 0) throw new InvalidGeminiRequest('* GenerateContentRequest.contents: contents is not specified');
  let previousCalls = 0;
  contents.forEach((raw: unknown, index: number) => {
    const where = `contents[${index}]`;
    const content = knownFields(raw, CONTENT, where);
    const role = content.role ?? 'user';
    if (role !== 'user' && role !== 'model') throw new InvalidGeminiRequest('Please use a valid role: user, model.');
    const { calls, responses, firstCallSigned } = checkParts(content, where, context);
    if (role === 'model' && calls > 0 && !firstCallSigned && /gemini-3/.test(context.model)) {
      throw new InvalidGeminiRequest(
        `Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call \`default_api:${content.parts.find((part: any) => part.functionCall).functionCall.name}\` , position ${index + 1}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.`,
      );
    }
    if (responses > 0 && previousCalls === 0) {
      throw new InvalidGeminiRequest('Please ensure that function response turn comes immediately after a function call turn.');
    }
    if (previousCalls > 0 && role === 'user' && responses !== previousCalls) {
      throw new InvalidGeminiRequest('Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.');
    }
    previousCalls = role === 'model' ? calls : 0;
  });
}

function checkTools(tools: unknown): void {
  if (!Array.isArray(tools)) throw new InvalidGeminiRequest("Invalid value at 'tools', expected a list");
  tools.forEach((raw: unknown, index: number) => {
    const tool = knownFields(raw, TOOL, `tools[${index}]`);
    if (tool.functionDeclarations === undefined) return;
    if (!Array.isArray(tool.functionDeclarations)) throw new InvalidGeminiRequest(`Invalid value at 'tools[${index}].function_declarations', expected a list`);
    tool.functionDeclarations.forEach((rawDeclaration: unknown, position: number) => {
      const where = `tools[${index}].functionDeclarations[${position}]`;
      const declaration = knownFields(rawDeclaration, DECLARATION, where);
      if (typeof declaration.name !== 'string' || !/^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$/.test(declaration.name)) {
        throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(where)}.name: Invalid function name. Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain underscores, dots, colons and dashes, with a maximum length of 64.`);
      }
      if (declaration.parameters !== undefined && declaration.parametersJsonSchema !== undefined) {
        throw new InvalidGeminiRequest(`* GenerateContentRequest.${snake(where)}: parameters and parameters_json_schema cannot both be set`);
      }
      if (declaration.parameters !== undefined) checkSchema(declaration.parameters, `${where}.parameters`);
      if (declaration.parametersJsonSchema !== undefined && !isObject(declaration.parametersJsonSchema)) {
        throw new InvalidGeminiRequest(`Invalid value at '${snake(where)}.parameters_json_schema', expected an object`);
      }
    });
  });
}

function checkThinking(raw: unknown, model: string): void {
  const thinking = knownFields(raw, THINKING_CONFIG, 'generationConfig.thinkingConfig');
  if (thinking.thinkingBudget !== undefined && thinking.thinkingLevel !== undefined) {
    throw new InvalidGeminiRequest('You can only set only one of thinking budget and thinking level.');
  }
  if (thinking.thinkingLevel !== undefined && !/gemini-3/.test(model)) throw new InvalidGeminiRequest('Thinking level is not supported for this model.');
  if (thinking.thinkingBudget === 0 && /gemini-(2\.5|3)[.-]?pro/.test(model)) {
    throw new InvalidGeminiRequest('Budget 0 is invalid. This model only works in thinking mode.');
  }
}

function checkGenerationConfig(raw: unknown, model: string, stream: boolean): void {
  const config = knownFields(raw, GENERATION_CONFIG, 'generationConfig');
  if (config.candidateCount !== undefined) {
    if (!Number.isInteger(config.candidateCount) || config.candidateCount < 1 || config.candidateCount > MAX_CANDIDATES) {
      throw new InvalidGeminiRequest(`* GenerateContentRequest.generation_config.candidate_count: must be in the range [1, ${MAX_CANDIDATES}].`);
    }
    // Several candidates are a generateContent feature: a stream carries one.
    if (stream && config.candidateCount > 1) {
      throw new InvalidGeminiRequest('* GenerateContentRequest.generation_config.candidate_count: multiple candidates are not supported for streamGenerateContent.');
    }
  }
  if (config.logprobs !== undefined) {
    if (!Number.isInteger(config.logprobs) || config.logprobs < 0 || config.logprobs > MAX_TOP_LOGPROBS) {
      throw new InvalidGeminiRequest(`* GenerateContentRequest.generation_config.logprobs: logprobs must be in the range [0, ${MAX_TOP_LOGPROBS}].`);
    }
    if (config.responseLogprobs !== true) {
      throw new InvalidGeminiRequest('* GenerateContentRequest.generation_config.logprobs: logprobs is only valid if response_logprobs is true.');
    }
  }
  if (config.thinkingConfig !== undefined) checkThinking(config.thinkingConfig, model);
  if (config.imageConfig !== undefined) {
    const image = knownFields(config.imageConfig, IMAGE_CONFIG, 'generationConfig.imageConfig');
    if (image.aspectRatio !== undefined && !ASPECT_RATIOS.has(image.aspectRatio)) {
      throw new InvalidGeminiRequest(`* GenerateContentRequest.generation_config.image_config.aspect_ratio: unsupported aspect ratio ${String(image.aspectRatio)}`);
    }
  }
  if (config.responseMimeType !== undefined && !MIME_TYPES.has(config.responseMimeType)) {
    throw new InvalidGeminiRequest(`* GenerateContentRequest.generation_config.response_mime_type: allowed mimetypes are \`text/plain\`, \`application/json\`, and \`text/x.enum\`.`);
  }
  if ((config.responseJsonSchema !== undefined || config.responseSchema !== undefined) && config.responseMimeType !== 'application/json' && config.responseMimeType !== 'text/x.enum') {
    throw new InvalidGeminiRequest('* GenerateContentRequest.generation_config.response_mime_type: response_mime_type must be set when response_schema is set.');
  }
  if (config.responseSchema !== undefined) checkSchema(config.responseSchema, 'generationConfig.responseSchema');
  if (Array.isArray(config.stopSequences) && config.stopSequences.length > 5) {
    throw new InvalidGeminiRequest('* GenerateContentRequest.generation_config.stop_sequences: the number of stop sequences must not exceed 5.');
  }
}

/** Throws InvalidGeminiRequest for a generateContent body the real API refuses. */
export function validateGenerateContent(raw: unknown, context: GeminiValidationContext): void {
  const body = knownFields(raw, REQUEST, 'request');
  checkContents(body.contents, context);
  if (body.systemInstruction !== undefined) {
    const system = knownFields(body.systemInstruction, CONTENT, 'systemInstruction');
    checkParts(system, 'systemInstruction', context);
  }
  if (body.tools !== undefined) checkTools(body.tools);
  if (body.toolConfig !== undefined) {
    const config = knownFields(body.toolConfig, TOOL_CONFIG, 'toolConfig');
    if (config.functionCallingConfig !== undefined) {
      const calling = knownFields(config.functionCallingConfig, FUNCTION_CALLING_CONFIG, 'toolConfig.functionCallingConfig');
      if (calling.mode !== undefined && !MODES.has(calling.mode)) {
        throw new InvalidGeminiRequest(`Invalid value at 'tool_config.function_calling_config.mode' (type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), "${String(calling.mode)}"`);
      }
      if (calling.allowedFunctionNames !== undefined && calling.mode !== 'ANY' && calling.mode !== 'VALIDATED') {
        throw new InvalidGeminiRequest('* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: only allowed when mode is ANY or VALIDATED.');
      }
    }
  }
  if (body.generationConfig !== undefined) checkGenerationConfig(body.generationConfig, context.model, context.stream === true);
}

const EMBED_REQUEST = fields('model', 'content', 'taskType', 'title', 'outputDimensionality');

/** Throws InvalidGeminiRequest for a batchEmbedContents body the real API refuses. */
export function validateBatchEmbed(raw: unknown, model: string): void {
  const body = knownFields(raw, fields('requests'), 'request');
  if (!Array.isArray(body.requests) || body.requests.length === 0) throw new InvalidGeminiRequest('* BatchEmbedContentsRequest.requests: requests is not specified');
  if (body.requests.length > 100) throw new InvalidGeminiRequest('* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch');
  body.requests.forEach((rawRequest: unknown, index: number) => {
    const request = knownFields(rawRequest, EMBED_REQUEST, `requests[${index}]`);
    if (request.model !== `models/${model}`) {
      throw new InvalidGeminiRequest(`* BatchEmbedContentsRequest.requests[${index}].model: model ${String(request.model)} does not match the batch model models/${model}.`);
    }
    const content = knownFields(request.content, CONTENT, `requests[${index}].content`);
    if (!Array.isArray(content.parts) || content.parts.length === 0) throw new InvalidGeminiRequest(`* BatchEmbedContentsRequest.requests[${index}].content.parts: contents.parts must not be empty.`);
  });
}
