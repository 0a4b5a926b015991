/**
 * The bench upstream's Gemini answers (`generateContent` and `streamGenerateContent?alt=sse`), built once
 * when the module loads: the same exchange as the OpenAI wire's (one line of text, 9 tokens in, 7 out),
 * so a gateway's CPU per request on either wire differs only by what its adapter does.
 *
 * Shapes as the Gemini API sends them (checked against googleapis/js-genai): a GenerateContentResponse
 * with `candidates[].content.parts[].text`, role `model`, `finishReason: "STOP"` on the last candidate,
 * `usageMetadata` on every streamed chunk (the last one complete), and SSE events `data: <json>` ending
 * in CRLF CRLF (the SDK's line pattern also takes LF LF; the real service sends CRLF CRLF).
 */

export const GEMINI_MODEL_VERSION = 'bench-upstream-model';
const RESPONSE_ID = 'bench-gemini-response';

interface GeminiChunkOptions {
  text: string;
  finish?: boolean;
  /** Output tokens so far; the prompt's 9 tokens are reported on every chunk. */
  outputTokens?: number;
}

function generateContentResponse({ text, finish = false, outputTokens }: GeminiChunkOptions): object {
  const usageMetadata =
    outputTokens === undefined
      ? { promptTokenCount: 9, totalTokenCount: 9, promptTokensDetails: [{ modality: 'TEXT', tokenCount: 9 }] }
      : { promptTokenCount: 9, candidatesTokenCount: outputTokens, totalTokenCount: 9 + outputTokens, promptTokensDetails: [{ modality: 'TEXT', tokenCount: 9 }] };
  return {
    candidates: [{ content: { parts: [{ text }], role: 'model' }, ...(finish ? { finishReason: 'STOP' } : {}), index: 0 }],
    usageMetadata,
    modelVersion: GEMINI_MODEL_VERSION,
    responseId: RESPONSE_ID,
  };
}

const sseEvent = (body: object) => `data: ${JSON.stringify(body)}\r\n\r\n`;

/** The whole answer of `:generateContent`. */
export const geminiJsonAnswer = Buffer.from(JSON.stringify(generateContentResponse({ text: 'Hello from the bench upstream.', finish: true, outputTokens: 7 })));
/** The first SSE event of `:streamGenerateContent?alt=sse`, sent at once. */
export const geminiFirstEvent = Buffer.from(sseEvent(generateContentResponse({ text: 'Hello' })));
/** The rest of the stream, sent after the bench's first-chunk gap; the last event finishes with usage. */
export const geminiRestEvents = Buffer.from(
  sseEvent(generateContentResponse({ text: ' from the' })) + sseEvent(generateContentResponse({ text: ' bench upstream.', finish: true, outputTokens: 7 })),
);

/** What the Gemini API answers a missing or wrong `x-goog-api-key` with (400, reason API_KEY_INVALID). */
export const geminiKeyInvalid = Buffer.from(
  JSON.stringify({
    error: {
      code: 400,
      message: 'API key not valid. Please pass a valid API key.',
      status: 'INVALID_ARGUMENT',
      details: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'API_KEY_INVALID', domain: 'googleapis.com' }],
    },
  }),
);
