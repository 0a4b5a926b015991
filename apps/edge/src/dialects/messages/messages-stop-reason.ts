/**
 * Canonical finish reason -> messages `stop_reason` (wire-formats.md). Exact, because agent loops branch
 * on it: an answer with tool calls is `tool_use` even when the provider said `stop` (a client that
 * sees `end_turn` there never runs the tool, field-failures.md), and `stop` with a matched stop
 * sequence is `stop_sequence`.
 */
export function messagesStopReason(finishReason: string, stopSequence: string, hasToolCalls: boolean): string {
  switch (finishReason) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    default:
      if (hasToolCalls) return 'tool_use';
      return stopSequence ? 'stop_sequence' : 'end_turn';
  }
}
