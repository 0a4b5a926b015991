import { startFakeGeminiUpstream, type FakeGeminiBehaviour, type FakeGeminiUpstream } from '@gateway/testing';
import type { ContractRig, ContractSetup, ReceivedRequest, ScriptedAnswer, WireReader, WireToolChoice } from '../contract-types.js';
import { fakeBackedRow, textOf } from './common.js';

/*
 * kind: gemini against the fake Gemini API (startFakeGeminiUpstream), which checks x-goog-api-key
 * (a wrong key is 400 API_KEY_INVALID), refuses what the API refuses and signs parts with thought
 * signatures it checks when they come back.
 */

const PROVIDER_ID = 'contract-gemini';
const KEY_ENV = 'CONTRACT_GEMINI_API_KEY';
const KEY = 'AIza-contract-gemini';
// A Gemini 3 model: the fake then insists on function-call signatures, as the API does.
const MODEL = 'gemini-3-pro-preview';

const FINISH: Record<string, string> = { stop: 'STOP', length: 'MAX_TOKENS', tool_calls: 'STOP' };

const RPC_STATUS: Record<number, string> = { 400: 'INVALID_ARGUMENT', 429: 'RESOURCE_EXHAUSTED', 500: 'INTERNAL', 503: 'UNAVAILABLE' };

export function geminiBehaviourFor(answer: ScriptedAnswer): FakeGeminiBehaviour {
  switch (answer.type) {
    case 'answer':
      return {
        ...(answer.text !== undefined ? { text: answer.text } : {}),
        ...(answer.toolCalls ? { functionCalls: answer.toolCalls.map((call) => ({ name: call.name, args: JSON.parse(call.arguments) })) } : {}),
        ...(answer.finish ? { finishReason: FINISH[answer.finish] } : {}),
        // candidatesTokenCount leaves the thoughts out; they are counted apart.
        ...(answer.usage
          ? {
              usage: {
                promptTokenCount: answer.usage.input,
                candidatesTokenCount: answer.usage.wireOutput ?? answer.usage.output - answer.usage.reasoning,
                thoughtsTokenCount: answer.usage.reasoning,
                cachedContentTokenCount: answer.usage.cacheRead,
              },
            }
          : {}),
        thought: answer.reasoning ?? false,
      };
    case 'error': {
      const status = RPC_STATUS[answer.status] ?? (answer.status >= 500 ? 'INTERNAL' : 'FAILED_PRECONDITION');
      return { status: answer.status, errorBody: { error: { code: answer.status, message: answer.message, status } } };
    }
    case 'safety':
      return { blockPrompt: 'SAFETY' };
    case 'reset':
      return { reset: true };
    case 'slow stream':
      return { text: answer.text, chunkCount: 40, chunkDelayMs: 150, thought: false };
    case 'stall':
      return { stall: true };
    case 'cut stream':
      return { text: answer.text, chunkCount: 6, cutAfterChunks: 2, thought: false };
    case 'stream error':
      return { text: answer.text, chunkCount: 6, streamErrorAfterChunks: 1, thought: false };
  }
}

const parts = (content: any): any[] => (Array.isArray(content?.parts) ? content.parts : []);
const contents = (request: ReceivedRequest): any[] => request.body?.contents ?? [];
const refOf = (value: any) => String(value?.id || value?.name);

export const geminiReader: WireReader = {
  model: (request) => /\/models\/([^/:]+):/.exec(request.path)?.[1] ?? '',
  streamed: (request) => request.path.includes(':streamGenerateContent'),
  systemText: (request) => textOf(parts(request.body?.systemInstruction)),
  turns: (request) =>
    contents(request).map((content) => ({
      role: content.role === 'model' ? 'assistant' : content.role,
      text: textOf(parts(content).filter((part) => !part.thought)),
    })),
  allText: (request) =>
    [textOf(parts(request.body?.systemInstruction)), ...contents(request).map((content) => textOf(parts(content).filter((part) => !part.thought)))].join('\n'),
  tools: (request) =>
    (request.body?.tools ?? []).flatMap((tool: any) =>
      (tool.functionDeclarations ?? []).map((declaration: any) => ({ name: declaration.name, parameters: declaration.parametersJsonSchema ?? declaration.parameters })),
    ),
  toolChoice: (request): WireToolChoice => {
    const config = request.body?.toolConfig?.functionCallingConfig;
    if (!config) return undefined;
    const allowed: string[] = config.allowedFunctionNames ?? [];
    if ((config.mode === 'ANY' || config.mode === 'VALIDATED') && allowed.length === 1) return { name: allowed[0]! };
    if (config.mode === 'ANY') return 'required';
    if (config.mode === 'NONE') return 'none';
    return 'auto';
  },
  toolCallsSentBack: (request) =>
    contents(request)
      .filter((content) => content.role === 'model')
      .flatMap((content) => parts(content).filter((part) => part.functionCall))
      .map((part) => ({ ref: refOf(part.functionCall), name: part.functionCall.name, arguments: part.functionCall.args })),
  toolResults: (request) =>
    contents(request)
      .filter((content) => content.role !== 'model')
      .flatMap((content) => parts(content).filter((part) => part.functionResponse))
      .map((part) => {
        const response = part.functionResponse.response ?? {};
        // Google's convention for a failed call: the response holds `error` (and nothing else).
        const failed = Object.keys(response).length === 1 && 'error' in response;
        return { ref: refOf(part.functionResponse), content: JSON.stringify(failed ? response.error : response), isError: failed };
      }),
  inlineMedia: (request) =>
    contents(request).flatMap((content) =>
      parts(content).filter((part) => part.inlineData).map((part) => ({ mediaType: part.inlineData.mimeType, base64: part.inlineData.data })),
    ),
  imageUrls: (request) =>
    contents(request).flatMap((content) => parts(content).filter((part) => part.fileData).map((part) => part.fileData.fileUri)),
  nativeSchema: (request) => request.body?.generationConfig?.responseJsonSchema ?? request.body?.generationConfig?.responseSchema,
  // Gemini signs parts: every thoughtSignature of a model turn, on whatever part it rides.
  reasoningSent: (request) =>
    contents(request)
      .filter((content) => content.role === 'model')
      .flatMap((content) => parts(content).filter((part) => part.thoughtSignature && part.thoughtSignature !== 'skip_thought_signature_validator'))
      .map((part) => ({ text: part.thought ? String(part.text ?? '') : '', signature: part.thoughtSignature })),
  redactedReasoningSent: () => [],
  generation: (request) => {
    const config = request.body?.generationConfig ?? {};
    return { temperature: config.temperature, maxTokens: config.maxOutputTokens, stop: config.stopSequences };
  },
  // Gemini has no inline cache marks (implicit caching, or a cachedContent made beforehand).
  cacheMarks: () => [],
};

export const geminiSetup: ContractSetup = {
  kind: 'gemini',
  unsupported: {
    'prompt cache marks': 'generateContent has no inline cache marks: caching is implicit or a cachedContent made beforehand',
    'redacted reasoning': 'Gemini returns no redacted reasoning (its thoughts are summaries; signatures ride on parts)',
    'stop sequence reported': 'Gemini finishes STOP without saying which stop sequence matched',
  },
  jsonSchema: 'native',
  safety: 'error',
  // Gemini has implicit and explicit caches it reads from; it reports no cache writes.
  usage: { cacheRead: true, cacheWrite: false, reasoning: true },
  async start(): Promise<ContractRig> {
    const fake: FakeGeminiUpstream = await startFakeGeminiUpstream({ apiKey: KEY });
    const config = { id: PROVIDER_ID, kind: 'gemini', apiKeyEnv: KEY_ENV };
    return {
      ...(await fakeBackedRow({ fake, config, path: '/v1beta', secrets: { [KEY_ENV]: KEY }, wrongSecrets: { [KEY_ENV]: 'AIza-wrong' } })),
      upstreamModel: MODEL,
      embeddingModel: 'gemini-embedding-001',
      modelMaxOutputTokens: 8_192,
      script: (answer) => fake.script(geminiBehaviourFor(answer)),
      reader: geminiReader,
    };
  },
};
