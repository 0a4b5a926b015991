import { startFakeBedrockUpstream, type FakeBedrockBehaviour, type FakeBedrockUpstream } from '@gateway/testing';
import type { ContractRig, ContractSetup, ReceivedRequest, ScriptedAnswer, WireReader, WireToolChoice } from '../contract-types.js';
import { fakeBackedRow, textAndToolCalls } from './common.js';

/*
 * kind: bedrock against the fake Bedrock Runtime (startFakeBedrockUpstream): Converse and ConverseStream
 * (binary eventstream), every request SigV4-verified with the fake's own credentials (so a wrong secret
 * key is refused as AWS refuses it), bodies checked as the service checks them, reasoning signed.
 */

const PROVIDER_ID = 'contract-bedrock';
const REGION = 'us-east-1';
const ACCESS_KEY_ENV = 'CONTRACT_BEDROCK_ACCESS_KEY_ID';
const SECRET_KEY_ENV = 'CONTRACT_BEDROCK_SECRET_ACCESS_KEY';
const ACCESS_KEY = 'AKIACONTRACTBEDROCK1';
const SECRET_KEY = 'contract/bedrock/secret/key/0123456789abcdef';
const MODEL = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';

const STOP_REASONS: Record<string, string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use' };

function behaviourFor(answer: ScriptedAnswer): FakeBedrockBehaviour {
  switch (answer.type) {
    case 'answer':
      return {
        ...textAndToolCalls(answer),
        ...(answer.finish ? { stopReason: STOP_REASONS[answer.finish] } : {}),
        ...(answer.stopSequence !== undefined ? { stopReason: 'stop_sequence', stopSequence: answer.stopSequence } : {}),
        // Bedrock's inputTokens leaves out the cache reads and writes.
        ...(answer.usage
          ? {
              usage: {
                inputTokens: answer.usage.input - answer.usage.cacheRead - answer.usage.cacheWrite,
                outputTokens: answer.usage.wireOutput ?? answer.usage.output,
                cacheReadInputTokens: answer.usage.cacheRead,
                cacheWriteInputTokens: answer.usage.cacheWrite,
              },
            }
          : {}),
        reasoning: answer.reasoning ?? false,
        ...(answer.redactedReasoning ? { redactedReasoning: true } : {}),
      };
    case 'error':
      return { status: answer.status, errorMessage: answer.message };
    case 'safety':
      // A guardrail blocking the prompt: the guardrail's canned text, stopReason guardrail_intervened.
      return { stopReason: 'guardrail_intervened', reasoning: false };
    case 'reset':
      return { reset: true };
    case 'slow stream':
      return { text: answer.text, chunkCount: 40, chunkDelayMs: 150, reasoning: false };
    case 'stall':
      return { stall: true };
    case 'cut stream':
      return { text: answer.text, chunkCount: 6, cutAfterChunks: 2, reasoning: false };
    case 'stream error':
      return { text: answer.text, chunkCount: 6, exceptionAfterChunks: 1, exceptionType: 'throttlingException', reasoning: false };
  }
}

const MEDIA_TYPES: Record<string, string> = { png: 'image/png', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', pdf: 'application/pdf' };

const blocks = (message: any): any[] => (Array.isArray(message?.content) ? message.content : []);
const messages = (request: ReceivedRequest): any[] => request.body?.messages ?? [];
const texts = (content: any[]): string => content.map((block) => (typeof block?.text === 'string' ? block.text : '')).join('');
const resultText = (content: any[]): string =>
  content.map((block) => (typeof block?.text === 'string' ? block.text : block?.json !== undefined ? JSON.stringify(block.json) : '')).join('');

const reader: WireReader = {
  model: (request) => decodeURIComponent(/^\/model\/([^/]+)\//.exec(request.path)?.[1] ?? ''),
  streamed: (request) => request.path.split('?')[0]!.endsWith('/converse-stream'),
  systemText: (request) => texts(request.body?.system ?? []),
  turns: (request) => messages(request).map((message) => ({ role: message.role, text: texts(blocks(message)) })),
  allText: (request) => [texts(request.body?.system ?? []), ...messages(request).map((message) => texts(blocks(message)))].join('\n'),
  tools: (request) =>
    (request.body?.toolConfig?.tools ?? []).filter((tool: any) => tool.toolSpec).map((tool: any) => ({ name: tool.toolSpec.name, parameters: tool.toolSpec.inputSchema?.json })),
  toolChoice: (request): WireToolChoice => {
    const choice = request.body?.toolConfig?.toolChoice;
    if (!choice) return undefined;
    if (choice.tool) return { name: choice.tool.name };
    if (choice.any) return 'required';
    return 'auto';
  },
  toolCallsSentBack: (request) =>
    messages(request).flatMap((message) =>
      blocks(message).filter((block) => block.toolUse).map((block) => ({ ref: block.toolUse.toolUseId, name: block.toolUse.name, arguments: block.toolUse.input })),
    ),
  toolResults: (request) =>
    messages(request).flatMap((message) =>
      blocks(message)
        .filter((block) => block.toolResult)
        .map((block) => ({ ref: block.toolResult.toolUseId, content: resultText(block.toolResult.content ?? []), isError: block.toolResult.status === 'error' })),
    ),
  inlineMedia: (request) =>
    messages(request).flatMap((message) =>
      blocks(message).flatMap((block) => {
        const media = block.image ?? block.document;
        if (!media || typeof media.source?.bytes !== 'string') return [];
        return [{ mediaType: MEDIA_TYPES[media.format] ?? media.format, base64: media.source.bytes }];
      }),
    ),
  imageUrls: () => [],
  // Converse has no JSON schema output common to its models: the fallback is instructed.
  nativeSchema: () => undefined,
  reasoningSent: (request) =>
    messages(request).flatMap((message) =>
      blocks(message)
        .filter((block) => block.reasoningContent?.reasoningText)
        .map((block) => ({ text: block.reasoningContent.reasoningText.text, signature: block.reasoningContent.reasoningText.signature })),
    ),
  redactedReasoningSent: (request) =>
    messages(request).flatMap((message) =>
      blocks(message).filter((block) => block.reasoningContent?.redactedContent).map((block) => block.reasoningContent.redactedContent),
    ),
  generation: (request) => {
    const config = request.body?.inferenceConfig ?? {};
    return { temperature: config.temperature, maxTokens: config.maxTokens, stop: config.stopSequences };
  },
  cacheMarks: (request) =>
    [...(request.body?.system ?? []), ...messages(request).flatMap(blocks)].filter((block) => block.cachePoint).map((block) => String(block.cachePoint.ttl ?? '')),
};

export const bedrockSetup: ContractSetup = {
  kind: 'bedrock',
  unsupported: {
    embeddings: 'the Converse API has no embeddings (Bedrock embeds through InvokeModel, which this adapter does not speak)',
    'image url input': 'Converse takes images as inline bytes (or an S3 location) only; the adapter refuses a link as the caller\'s 400',
  },
  jsonSchema: 'instructed',
  // A guardrail's stop reason arrives after its canned text: a whole answer becomes the content_filter
  // error, a stream has already relayed the text and can only finish with content_filter.
  safety: { chat: 'error', stream: 'finish' },
  // Converse reports no reasoning token count.
  usage: { cacheRead: true, cacheWrite: true, reasoning: false },
  async start(): Promise<ContractRig> {
    const fake: FakeBedrockUpstream = await startFakeBedrockUpstream({ region: REGION, accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY });
    const config = { id: PROVIDER_ID, kind: 'bedrock', region: REGION, accessKeyIdEnv: ACCESS_KEY_ENV, secretAccessKeyEnv: SECRET_KEY_ENV };
    return {
      ...(await fakeBackedRow({
        fake,
        config,
        secrets: { [ACCESS_KEY_ENV]: ACCESS_KEY, [SECRET_KEY_ENV]: SECRET_KEY },
        wrongSecrets: { [ACCESS_KEY_ENV]: ACCESS_KEY, [SECRET_KEY_ENV]: 'not/the/secret/key' },
      })),
      upstreamModel: MODEL,
      modelMaxOutputTokens: 8_192,
      script: (answer) => fake.script(behaviourFor(answer)),
      reader,
      upstreamOpenRequests: () => fake.openRequests(),
    };
  },
};
