import type { ChatRequest, Usage } from '@gateway/proto';
import type { AnswerChoice } from '../observability/gen-ai-content.js';
import type { AdapterStreamPart } from '../providers/provider-adapter.js';
import { countInputTokens, countTextTokens, meterCounted, type DeliveredOutput } from '../usage/token-counter.js';

/** What a stream delivered, and (for its checkpoints, StreamProgress) how often that changed. */
export class DeliveredContent {
  /** Bumped on every delta and on the provider's usage report. */
  changes = 0;
  private readonly content = new Map<number, string>();
  private readonly reasoning = new Map<number, string>();
  /** By `choice:index`; the id and name from the call's first delta that has them. */
  private readonly toolCalls = new Map<string, { id: string; name: string; arguments: string }>();
  /** Checkpoints only (long streams): the prompt's count, and how much of each text is already counted. */
  private inputTokens = -1;
  private outputTokens = 0;
  private counted: Map<string, number> | null = null;

  add(part: Extract<AdapterStreamPart, { type: 'delta' }>['delta']) {
    this.changes++;
    if (part.content) this.content.set(part.choiceIndex, (this.content.get(part.choiceIndex) ?? '') + part.content);
    if (part.reasoning) this.reasoning.set(part.choiceIndex, (this.reasoning.get(part.choiceIndex) ?? '') + part.reasoning);
    for (const call of part.toolCalls) {
      const key = `${part.choiceIndex}:${call.index}`;
      const existing = this.toolCalls.get(key) ?? { id: '', name: '', arguments: '' };
      this.toolCalls.set(key, { id: existing.id || call.id, name: existing.name || call.name, arguments: existing.arguments + call.arguments });
    }
  }

  get output(): DeliveredOutput {
    return {
      content: [...this.content.values()].join(''),
      reasoning: [...this.reasoning.values()].join(''),
      toolCalls: [...this.toolCalls.values()],
    };
  }

  /**
   * What was delivered, per choice in index order, for the attempt's span when message content is recorded
   * (read once, at the stream's end). `finishReason`: the stream's.
   */
  choices(finishReason: string): AnswerChoice[] {
    const byIndex = new Map<number, AnswerChoice & { toolCalls: AnswerChoice['toolCalls'][number][] }>();
    const choice = (index: number) => {
      let found = byIndex.get(index);
      if (found === undefined) {
        found = { content: '', reasoning: '', toolCalls: [], finishReason };
        byIndex.set(index, found);
      }
      return found;
    };
    for (const [index, text] of this.content) choice(index).content = text;
    for (const [index, text] of this.reasoning) choice(index).reasoning = text;
    for (const [key, call] of this.toolCalls) choice(Number(key.slice(0, key.indexOf(':')))).toolCalls.push(call);
    return [...byIndex.entries()].sort(([a], [b]) => a - b).map(([, found]) => found);
  }

  /**
   * The usage metered so far, by meterUsage's rules, for a stream checkpoint. Checkpoints of a long
   * stream come every 200 ms: the prompt is counted once and only the output added since the last
   * checkpoint is tokenized (pieces may count a token more at their seams than the whole would).
   */
  usageSoFar(reported: Usage | undefined, request: ChatRequest): Usage {
    if (this.inputTokens < 0) this.inputTokens = countInputTokens(request.messages, request.tools);
    const counted = (this.counted ??= new Map());
    const countNew = (key: string, text: string) => {
      const from = counted.get(key) ?? 0;
      if (text.length <= from) return;
      this.outputTokens += countTextTokens(text.slice(from));
      counted.set(key, text.length);
    };
    for (const [choice, text] of this.content) countNew(`c${choice}`, text);
    for (const [choice, text] of this.reasoning) countNew(`r${choice}`, text);
    for (const [key, call] of this.toolCalls) {
      countNew(`n${key}`, call.name);
      countNew(`a${key}`, call.arguments);
    }
    const deliveredSomething = this.content.size > 0 || this.reasoning.size > 0 || this.toolCalls.size > 0;
    return meterCounted(reported, this.inputTokens, this.outputTokens, deliveredSomething);
  }
}
