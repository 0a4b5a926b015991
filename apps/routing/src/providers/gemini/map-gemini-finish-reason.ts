/**
 * Gemini `finishReason` onto the canonical finish reasons (stop | length | tool_calls | content_filter).
 * Gemini ends a function-calling answer with STOP: with calls present it must become tool_calls, or an
 * agent loop never runs its tools. Safety-type reasons are not mapped here: they are refusals
 * (see geminiBlock), turned into a content_filter error before any finish reason is reported.
 */
export function mapGeminiFinishReason(reason: string | null | undefined, hasToolCalls: boolean): string {
  switch (reason) {
    case 'MAX_TOKENS':
      return 'length';
    case 'SAFETY':
    case 'RECITATION':
    case 'BLOCKLIST':
    case 'PROHIBITED_CONTENT':
    case 'SPII':
    case 'IMAGE_SAFETY':
    case 'IMAGE_PROHIBITED_CONTENT':
    case 'IMAGE_RECITATION':
      return 'content_filter';
    default:
      // STOP, and reasons without a canonical peer (OTHER, LANGUAGE, MALFORMED_FUNCTION_CALL, newer ones).
      return hasToolCalls ? 'tool_calls' : 'stop';
  }
}

/** Finish reasons that mean the model's output was withheld for safety or policy (the request is refused). */
const BLOCKING_FINISH_REASONS = new Set([
  'SAFETY', 'BLOCKLIST', 'PROHIBITED_CONTENT', 'SPII', 'IMAGE_SAFETY', 'IMAGE_PROHIBITED_CONTENT',
]);

/** Whether a candidate's finish reason is a safety or policy block. RECITATION is not: what was said stands. */
export function isBlockingFinishReason(reason: string | null | undefined): boolean {
  return reason != null && BLOCKING_FINISH_REASONS.has(reason);
}
