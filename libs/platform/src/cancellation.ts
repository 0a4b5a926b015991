/**
 * What callers of a cancellable operation pass: the part of an AbortSignal the services use. An
 * AbortSignal is one; so is `Cancellation`, which the hot paths use instead of an AbortController.
 *
 * Why not an AbortController per request: in Node 20 (V8 11) every AbortSignal gets hidden classes of
 * its own (the signal is made as an EventTarget whose prototype is then swapped, and three properties
 * are added after the swap, outside V8's transition tree), so each one costs three fresh Maps in old
 * space. A request graph holding such a signal survived young-generation GCs (measured: 10× the
 * survivors in a micro-benchmark; docs/performance.md), and every property access on a signal
 * meets a map it has never seen.
 */
export interface CallerSignal {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** A cancellation without an AbortController: a flag, a reason and its listeners. */
export class Cancellation implements CallerSignal {
  aborted = false;
  reason: unknown = undefined;
  private listeners: Array<() => void> = [];

  /** Like AbortController.abort: the first reason stays, and every listener runs once. */
  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason ?? new DOMException('This operation was aborted', 'AbortError');
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) {
      try {
        listener();
      } catch (error) {
        // As an EventTarget does: one failing listener neither stops the others nor goes unseen.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  /** As on an AbortSignal, a listener added after the abort is never called. */
  addEventListener(_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const index = this.listeners.indexOf(listener);
    if (index >= 0) this.listeners.splice(index, 1);
  }
}
