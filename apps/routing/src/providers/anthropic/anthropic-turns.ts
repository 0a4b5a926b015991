export type TurnRole = 'user' | 'assistant';

/** One turn being built: three runs of blocks, sent in this order. */
export interface Turn<Block> {
  role: TurnRole;
  /** user: tool results; assistant: reasoning. Both must come first in their turn. */
  leading: Block[];
  /** What was said: text, images, documents. */
  body: Block[];
  /** assistant: tool calls, after what was said. */
  trailing: Block[];
}

/**
 * A conversation as Anthropic's Messages API and Bedrock's Converse take it: user and assistant turns
 * alternating, so consecutive canonical messages of one role land in one turn (both converters build
 * their turns here; only the blocks differ).
 */
export class AlternatingTurns<Block> {
  private readonly turns: Turn<Block>[] = [];

  /** The turn a message of this role goes into: the last turn when it has that role, else a new one. */
  turnFor(role: TurnRole): Turn<Block> {
    const last = this.turns.at(-1);
    if (last && last.role === role) return last;
    const turn: Turn<Block> = { role, leading: [], body: [], trailing: [] };
    this.turns.push(turn);
    return turn;
  }

  /**
   * An assistant message's blocks: its reasoning leads its turn, its tool calls trail what it said. A message
   * with none adds nothing (an empty turn is refused, and nothing is lost).
   */
  addAssistant(reasoning: Block[], said: Block[], calls: Block[]): void {
    if (reasoning.length + said.length + calls.length === 0) return;
    const turn = this.turnFor('assistant');
    turn.leading.push(...reasoning);
    turn.body.push(...said);
    turn.trailing.push(...calls);
  }

  /** Each turn as a message: its leading, body and trailing blocks in that order. */
  messages(): { role: TurnRole; content: Block[] }[] {
    return this.turns.map((turn) => ({ role: turn.role, content: [...turn.leading, ...turn.body, ...turn.trailing] }));
  }
}
