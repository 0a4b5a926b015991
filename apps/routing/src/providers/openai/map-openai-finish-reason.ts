/**
 * OpenAI-compatible finish reasons onto the canonical set (stop | length | tool_calls | content_filter |
 * error). `error` is OpenRouter's: the upstream failed the generation (zero-completion insurance reads it).
 */
export function mapOpenAIFinishReason(reason: string | null | undefined): string {
  switch (reason) {
    case 'length':
      return 'length';
    case 'tool_calls':
    case 'function_call':
      return 'tool_calls';
    case 'content_filter':
      return 'content_filter';
    case 'error':
      return 'error';
    default:
      // stop, eos, end_turn and servers that invent their own: the answer ended normally.
      return 'stop';
  }
}
