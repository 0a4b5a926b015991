/**
 * Recognising a refusal that names one request parameter the upstream model does not take (issue 27,
 * item 8: the learned capability map). Each provider's `<kind>-error.ts` finds the name in its own
 * words; this module turns the provider's spelling of a field into the gateway's vocabulary (the chat
 * completions spelling the learned map and `x-gateway-dropped-params` use). A name with no gateway
 * meaning is kept as the provider spelled it: routing then looks for it among the request's extra_body
 * keys, and ignores it otherwise.
 */

/** Provider wire names (any casing, `_` ignored) → the gateway's name of the parameter. */
const GATEWAY_NAMES: ReadonlyMap<string, string> = new Map([
  ['temperature', 'temperature'],
  ['topp', 'top_p'],
  ['topk', 'top_k'],
  ['stop', 'stop'],
  ['stopsequences', 'stop'],
  ['presencepenalty', 'presence_penalty'],
  ['frequencypenalty', 'frequency_penalty'],
  ['paralleltoolcalls', 'parallel_tool_calls'],
  ['reasoningeffort', 'reasoning_effort'],
  // Anthropic's extended thinking and effort, Gemini's thinking configuration: the same request field.
  ['thinking', 'reasoning_effort'],
  ['outputconfig.effort', 'reasoning_effort'],
  ['thinkingconfig', 'reasoning_effort'],
  ['user', 'user'],
  ['metadata.userid', 'user'],
  ['metadata', 'user'],
  ['promptcachekey', 'prompt_cache_key'],
]);

/** Longest parameter name kept (a provider message could name anything). */
const MAX_NAME_LENGTH = 64;
/** A top-level field name, or one dotted step below it; never a path into messages or tools. */
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;

/** The gateway's name for a field the provider named, '' when it cannot be a request parameter at all. */
export function gatewayParameterName(providerName: string | null | undefined): string {
  if (!providerName || providerName.length > MAX_NAME_LENGTH || !FIELD_NAME.test(providerName)) return '';
  const known = GATEWAY_NAMES.get(providerName.toLowerCase().replaceAll('_', ''));
  if (known !== undefined) return known;
  // Structural fields are never "a parameter the model lacks": dropping them would change the request itself.
  return STRUCTURAL.has(providerName) || providerName.includes('.') ? '' : providerName;
}

const STRUCTURAL = new Set([
  'model', 'messages', 'contents', 'system', 'systemInstruction', 'system_instruction', 'tools', 'tool_choice', 'toolConfig',
  'tool_config', 'stream', 'stream_options', 'max_tokens', 'max_completion_tokens', 'maxOutputTokens', 'max_output_tokens',
  'generationConfig', 'generation_config', 'response_format', 'responseMimeType', 'responseSchema', 'n', 'candidateCount',
]);
