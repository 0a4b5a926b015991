import type { AssistantMessage, ChatChoice, ChatResponse, ChatStreamDelta, ChatStreamResponse, ChatStreamStart, Usage } from '@gateway/proto';

/*
 * A background run streams (Router.ChatStream) so its records exist; the stored answer (what GET renders
 * without `stream`, and what a continuation carries) is still a ChatResponse, gathered here from the
 * stream's messages as Router.Chat would have answered it. Per-token logprobs are not gathered (the
 * streamed records keep them).
 */
export class StreamAnswer {
  private start: ChatStreamStart | undefined;
  private usage: Usage | undefined;
  private readonly choices = new Map<number, { choice: ChatChoice; message: AssistantMessage; calls: Map<number, number>; reasoningOpen: boolean }>();

  add(message: ChatStreamResponse): void {
    const event = message.event;
    if (!event) return;
    if (event.$case === 'start') {
      this.start = event.value;
      if (event.value.firstDelta) this.delta(event.value.firstDelta);
    } else if (event.$case === 'delta') this.delta(event.value);
    else if (event.$case === 'usage') this.usage = event.value;
  }

  /** Whether the stream ended with its usage (a whole answer). */
  get complete(): boolean {
    return this.start !== undefined && this.usage !== undefined;
  }

  answer(): ChatResponse {
    const start = this.start;
    return {
      id: start?.id ?? '',
      modelId: start?.modelId ?? '',
      created: start?.created ?? 0n,
      choices: [...this.choices.entries()].sort(([a], [b]) => a - b).map(([, state]) => state.choice),
      usage: this.usage,
      providerId: start?.providerId ?? '',
      routingStrategy: start?.routingStrategy ?? '',
      droppedParams: start?.droppedParams ?? [],
      prices: start?.prices,
    };
  }

  private delta(delta: ChatStreamDelta): void {
    let state = this.choices.get(delta.choiceIndex);
    if (state === undefined) {
      const message: AssistantMessage = { content: '', toolCalls: [], reasoning: [], images: [] };
      state = { choice: { index: delta.choiceIndex, message, finishReason: '', stopSequence: '' }, message, calls: new Map(), reasoningOpen: false };
      this.choices.set(delta.choiceIndex, state);
    }
    const { message } = state;
    const providerId = this.start?.providerId ?? '';
    if (delta.reasoning) {
      if (!state.reasoningOpen) message.reasoning.push({ text: '', signature: '', encryptedData: '', providerId });
      state.reasoningOpen = true;
      message.reasoning[message.reasoning.length - 1]!.text += delta.reasoning;
    }
    if (delta.reasoningSignature) {
      if (!state.reasoningOpen) message.reasoning.push({ text: '', signature: '', encryptedData: '', providerId });
      message.reasoning[message.reasoning.length - 1]!.signature = delta.reasoningSignature;
      state.reasoningOpen = false;
    }
    if (delta.reasoningEncrypted) {
      message.reasoning.push({ text: '', signature: '', encryptedData: delta.reasoningEncrypted, providerId });
      state.reasoningOpen = false;
    }
    message.content += delta.content;
    for (const call of delta.toolCalls) {
      let at = state.calls.get(call.index);
      if (at === undefined) {
        at = message.toolCalls.length;
        state.calls.set(call.index, at);
        message.toolCalls.push({ id: '', name: '', arguments: '' });
      }
      const found = message.toolCalls[at]!;
      found.id ||= call.id;
      found.name ||= call.name;
      found.arguments += call.arguments;
      if (call.signature !== undefined) {
        found.signature = call.signature;
        found.signatureProviderId = providerId;
      }
    }
    message.images.push(...delta.images);
    if (delta.finishReason) state.choice.finishReason = delta.finishReason;
    if (delta.stopSequence) state.choice.stopSequence = delta.stopSequence;
  }
}
