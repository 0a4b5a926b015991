import type { Candidate } from '../strategies/index.js';

/**
 * A request's attempts, in order: each candidate once, unless a failure steers the queue — the same
 * candidate once more (`retrySame`), or on to the first candidate of another model (`skipToModel`).
 */
export class AttemptQueue {
  /** Index of the next candidate to take. */
  private next = 0;
  /** Index of the candidate already tried a second time (-1: none). */
  private retried = -1;

  constructor(private readonly candidates: readonly Candidate[]) {}

  /** The next attempt's candidate; undefined when none is left. */
  take(): Candidate | undefined {
    return this.next < this.candidates.length ? this.candidates[this.next++] : undefined;
  }

  /** The candidate's position in the list (1-based) of the attempt last taken: the trace's `gateway.attempts`. */
  get position(): number {
    return this.next;
  }

  /** The candidate last taken is tried again, once per candidate: false when it already was. */
  retrySame(): boolean {
    const current = this.next - 1;
    if (this.retried === current) return false;
    this.retried = current;
    this.next = current;
    return true;
  }

  /** The next attempt goes to the first later candidate of another model: false when none follows. */
  skipToModel(): boolean {
    const model = this.candidates[this.next - 1]?.model;
    if (model === undefined) return false;
    for (let index = this.next; index < this.candidates.length; index++) {
      if (this.candidates[index]!.model !== model) {
        this.next = index;
        return true;
      }
    }
    return false;
  }
}
