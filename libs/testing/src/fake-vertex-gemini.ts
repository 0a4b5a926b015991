import type { ServerResponse } from 'node:http';
import { approximateTokens, splitText } from './fake-upstream-support.js';

const GEMINI_TEXT = 'Hello from the fake Vertex Gemini.';

function countPromptText(body: any): string {
  const parts: string[] = [];
  for (const content of [body?.systemInstruction, ...(Array.isArray(body?.contents) ? body.contents : [])]) {
    for (const part of Array.isArray(content?.parts) ? content.parts : []) if (typeof part?.text === 'string') parts.push(part.text);
  }
  return parts.join('\n');
}

/**
 * A minimal Gemini answer (text only) on Vertex's google publisher routes: `generateContent` as one
 * GenerateContentResponse, `streamGenerateContent?alt=sse` as SSE events of them (CRLF line ends, as
 * Google sends), without `alt=sse` as one JSON array.
 */
export function answerGeminiMinimal(response: ServerResponse, body: any, model: string, stream: boolean, alt: string | null) {
  if (!body || !Array.isArray(body.contents) || body.contents.length === 0) {
    response.writeHead(400, { 'content-type': 'application/json; charset=UTF-8' });
    response.end(JSON.stringify({ error: { code: 400, message: 'Unable to submit request because it has an empty contents field.', status: 'INVALID_ARGUMENT' } }));
    return;
  }
  const prompt = approximateTokens(countPromptText(body));
  const output = approximateTokens(GEMINI_TEXT);
  const usage = { promptTokenCount: prompt, candidatesTokenCount: output, totalTokenCount: prompt + output };
  const chunk = (text: string, last: boolean) => ({
    candidates: [{ content: { role: 'model', parts: [{ text }] }, ...(last ? { finishReason: 'STOP' } : {}) }],
    ...(last ? { usageMetadata: usage } : {}),
    modelVersion: model,
    createTime: new Date().toISOString(),
    responseId: 'fake-vertex-gemini',
  });
  if (!stream) {
    response.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
    response.end(JSON.stringify(chunk(GEMINI_TEXT, true)));
    return;
  }
  const pieces = splitText(GEMINI_TEXT, 3);
  const chunks = pieces.map((piece, index) => chunk(piece, index === pieces.length - 1));
  if (alt !== 'sse') {
    response.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
    response.end(JSON.stringify(chunks));
    return;
  }
  response.writeHead(200, { 'content-type': 'text/event-stream' });
  response.end(chunks.map((value) => `data: ${JSON.stringify(value)}\r\n\r\n`).join(''));
}
