import { describe, expect, it } from 'vitest';
import { anthropicHttpError } from './anthropic/anthropic-error.js';
import { bedrockHttpError } from './bedrock/bedrock-error.js';
import { azureOpenAIHttpError } from './azure-openai/azure-openai-error.js';
import { geminiHttpError } from './gemini/gemini-error.js';
import { openAIHttpError } from './openai/openai-error.js';

// Issue 27, item 8: a 400 that names one parameter the upstream model lacks carries that parameter, in
// the gateway's vocabulary, on the ProviderError. The bodies are the providers' own, as they answered
// real clients (OpenAI reasoning models, Claude's request validation, Gemini's JSON decoder).

const openai = (message: string, param: string | null, code: string | null) =>
  JSON.stringify({ error: { message, type: 'invalid_request_error', param, code } });
const anthropic = (message: string) => JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message }, request_id: 'req_011' });
const gemini = (message: string) =>
  JSON.stringify({
    error: {
      code: 400,
      message,
      status: 'INVALID_ARGUMENT',
      details: [{ '@type': 'type.googleapis.com/google.rpc.BadRequest', fieldViolations: [{ field: 'generation_config', description: message }] }],
    },
  });

describe('OpenAI: unsupported parameter refusals', () => {
  it.each([
    [openai("Unsupported parameter: 'temperature' is not supported with this model.", 'temperature', 'unsupported_parameter'), 'temperature'],
    // gpt-5.2 answered with the message and param but a null code.
    [openai("Unsupported parameter: 'temperature' is not supported with this model.", 'temperature', null), 'temperature'],
    [openai("Unsupported parameter: 'top_p' is not supported with this model.", 'top_p', 'unsupported_parameter'), 'top_p'],
    [openai("Unsupported parameter: 'parallel_tool_calls' is not supported with this model.", 'parallel_tool_calls', 'unsupported_parameter'), 'parallel_tool_calls'],
    // Older answers (and Azure) name it only in the message.
    [openai('Unrecognized request argument supplied: seed', null, null), 'seed'],
    [openai('Unrecognized request argument supplied: presence_penalty', null, null), 'presence_penalty'],
  ])('%s names %s', (body, name) => {
    const error = openAIHttpError(400, body);
    expect(error.kind).toBe('rejected');
    expect(error.unsupportedParameter).toBe(name);
  });

  // Issue 35 item 2: a refused VALUE says nothing about the parameter (another account's temperature 0.3
  // or reasoning_effort "low" may be fine), so it is never learned; the caller gets the 400 as it is.
  it.each([
    [openai("Unsupported value: 'temperature' does not support 1.9 with this model. Only the default (1) value is supported.", 'temperature', 'unsupported_value')],
    [openai("Unsupported value: 'reasoning_effort' does not support 'minimal' with this model. Supported values are: 'low', 'medium', and 'high'.", 'reasoning_effort', 'unsupported_value')],
    // The same words with the code left null (a compatible server), or with only the message.
    [openai("Unsupported value: 'temperature' does not support 1.9 with this model.", 'temperature', null)],
    [openai("Unsupported value: 'reasoning_effort' does not support 'minimal' with this model.", null, null)],
    [openai("Invalid value for 'temperature': must be between 0 and 2.", 'temperature', 'invalid_value')],
    [openai('1.9 is greater than the maximum of 1 - \'temperature\'', 'temperature', 'integer_above_max_value')],
  ])('a refused value names nothing: %s', (body) => {
    const error = openAIHttpError(400, body);
    expect(error.kind).toBe('rejected');
    expect(error.unsupportedParameter).toBe('');
    expect(azureOpenAIHttpError(400, body).unsupportedParameter).toBe('');
  });

  it('names nothing for refusals about the request itself or the output bound', () => {
    // max_tokens is the request's output bound: never dropped (the hold assumes it).
    expect(openAIHttpError(400, openai("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", 'max_tokens', 'unsupported_parameter')).unsupportedParameter).toBe('');
    expect(openAIHttpError(400, openai("Unsupported value: 'messages[0].role' does not support 'system' with this model.", 'messages[0].role', 'unsupported_value')).unsupportedParameter).toBe('');
    expect(openAIHttpError(400, openai("Invalid type for 'temperature': expected a decimal, but got a string instead.", 'temperature', 'invalid_type')).unsupportedParameter).toBe('');
    expect(openAIHttpError(400, openai('This model\'s maximum context length is 8192 tokens.', 'messages', 'context_length_exceeded')).unsupportedParameter).toBe('');
    // Not a 400: an outage keeps failing over, whatever it says.
    expect(openAIHttpError(500, openai("Unsupported parameter: 'temperature' is not supported with this model.", 'temperature', 'unsupported_parameter')).unsupportedParameter).toBe('');
  });

  it('Azure OpenAI keeps the name (its deployments answer in OpenAI words)', () => {
    expect(azureOpenAIHttpError(400, openai('Unrecognized request argument supplied: parallel_tool_calls', null, null)).unsupportedParameter).toBe('parallel_tool_calls');
  });
});

describe('Anthropic: extra inputs', () => {
  it.each([
    ['top_k: Extra inputs are not permitted', 'top_k'],
    ['temperature: Extra inputs are not permitted', 'temperature'],
    ['stop_sequences: Extra inputs are not permitted', 'stop'],
    ['thinking: Extra inputs are not permitted', 'reasoning_effort'],
    ['metadata.user_id: Extra inputs are not permitted', 'user'],
    ['context_management: Extra inputs are not permitted', 'context_management'],
  ])('%s names %s', (message, name) => {
    const error = anthropicHttpError(400, anthropic(message));
    expect(error.kind).toBe('rejected');
    expect(error.unsupportedParameter).toBe(name);
  });

  it('names nothing for a path inside the conversation or tools', () => {
    expect(anthropicHttpError(400, anthropic('messages.65.content.1.tool_use.text: Extra inputs are not permitted')).unsupportedParameter).toBe('');
    expect(anthropicHttpError(400, anthropic('tools.0.custom.defer_loading: Extra inputs are not permitted')).unsupportedParameter).toBe('');
    expect(anthropicHttpError(400, anthropic('max_tokens: Field required')).unsupportedParameter).toBe('');
    expect(anthropicHttpError(400, anthropic('prompt is too long: 210000 tokens > 200000 maximum')).unsupportedParameter).toBe('');
  });

  it('names nothing for a refused value or combination (issue 35 item 2: only a parameter as such is learned)', () => {
    expect(anthropicHttpError(400, anthropic('temperature: Input should be less than or equal to 1')).unsupportedParameter).toBe('');
    expect(anthropicHttpError(400, anthropic('thinking.budget_tokens: Input should be greater than or equal to 1024')).unsupportedParameter).toBe('');
    expect(anthropicHttpError(400, anthropic("output_config.effort: Input should be 'low', 'medium' or 'high'")).unsupportedParameter).toBe('');
    // Both sampling controls at once: refused for the pair, not for top_p alone (a request with top_p only is fine).
    expect(anthropicHttpError(400, anthropic('`temperature` and `top_p` cannot both be specified for this model. Please use only one.')).unsupportedParameter).toBe('');
  });
});

describe('Gemini: unknown names', () => {
  it.each([
    ['Invalid JSON payload received. Unknown name "topK" at \'generation_config\': Cannot find field.', 'top_k'],
    ['Invalid JSON payload received. Unknown name "presencePenalty" at \'generation_config\': Cannot find field.', 'presence_penalty'],
    ['Invalid JSON payload received. Unknown name "thinkingConfig" at \'generation_config\': Cannot find field.', 'reasoning_effort'],
    ['Invalid JSON payload received. Unknown name "seed" at \'generation_config\': Cannot find field.', 'seed'],
    ['Penalty is not enabled for models/gemini-2.5-flash', 'presence_penalty'],
    ['Logprobs is not enabled for models/gemini-2.5-pro', 'logprobs'],
    ['Invalid JSON payload received. Unknown name "responseLogprobs" at \'generation_config\': Cannot find field.', 'logprobs'],
  ])('%s names %s', (message, name) => {
    const error = geminiHttpError(400, gemini(message));
    expect(error.kind).toBe('rejected');
    expect(error.unsupportedParameter).toBe(name);
  });

  it('names nothing for unknown names inside tools or contents, or several of them', () => {
    const inTools = 'Invalid JSON payload received. Unknown name "additionalProperties" at \'tools[0].function_declarations[34].parameters\': Cannot find field.';
    expect(geminiHttpError(400, gemini(inTools)).unsupportedParameter).toBe('');
    const inContents = 'Invalid JSON payload received. Unknown name "id" at \'contents[7].parts[0].function_response\': Cannot find field.';
    expect(geminiHttpError(400, gemini(inContents)).unsupportedParameter).toBe('');
    const two = 'Invalid JSON payload received. Unknown name "topK" at \'generation_config\': Cannot find field.\nInvalid JSON payload received. Unknown name "seed" at \'generation_config\': Cannot find field.';
    expect(geminiHttpError(400, gemini(two)).unsupportedParameter).toBe('');
    expect(geminiHttpError(400, gemini('Invalid JSON payload received. Unknown name "system_instruction": Cannot find field.')).unsupportedParameter).toBe('');
  });

  it('names nothing for a refused value (issue 35 item 2)', () => {
    expect(geminiHttpError(400, gemini('Unable to submit request because it has a temperature value of 2.5 but the supported range is from 0 (inclusive) to 2.0001 (exclusive). Update the value and try again.')).unsupportedParameter).toBe('');
    expect(geminiHttpError(400, gemini('Budget 0 is invalid. This model only works in thinking mode.')).unsupportedParameter).toBe('');
    expect(geminiHttpError(400, gemini('Invalid value at \'generation_config.temperature\' (TYPE_FLOAT), "hot"')).unsupportedParameter).toBe('');
  });
});

describe('Bedrock: nothing is learned', () => {
  // Converse's ValidationException words a refused field and a refused value alike ("… isn't supported",
  // "… out of range"), so Bedrock refusals teach the map nothing: each is the caller's 400 as it is.
  it.each([
    ['The model returned the following errors: temperature: range: 0..1'],
    ["This model doesn't support the stopSequences field. Remove stopSequences and try again."],
    ['The model returned the following errors: top_k: Extra inputs are not permitted'],
  ])('%s', (message) => {
    const error = bedrockHttpError(400, JSON.stringify({ message }), 'ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/');
    expect(error.kind).toBe('rejected');
    expect(error.unsupportedParameter).toBe('');
  });
});
