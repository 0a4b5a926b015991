/**
 * Bedrock `stopReason` (enums.ts StopReason) onto the canonical finish reasons. `guardrail_intervened`
 * and `content_filtered` are safety blocks: the adapters turn them into a `content_filter` ProviderError
 * when nothing was said yet (isBedrockSafetyStop), and into this finish reason otherwise.
 */
export function mapBedrockFinishReason(reason: string | null | undefined): string {
  switch (reason) {
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'guardrail_intervened':
    case 'content_filtered':
      return 'content_filter';
    default:
      // end_turn, stop_sequence and reasons a later API version adds: the answer ended normally.
      return 'stop';
  }
}

export function isBedrockSafetyStop(reason: string | null | undefined): boolean {
  return reason === 'guardrail_intervened' || reason === 'content_filtered';
}
