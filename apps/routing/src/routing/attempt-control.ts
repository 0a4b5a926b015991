import { Cancellation, type CallerSignal } from '@gateway/platform';
import type { Usage } from '@gateway/proto';
import type { AttemptSignal } from '../providers/provider-adapter.js';

const NONE: readonly string[] = [];

export class AttemptTimeout extends Error {
  override name = 'TimeoutError';
}

/**
 * One attempt's cancellation: the caller's cancellation or a restartable per-attempt timer, whichever
 * comes first. It is the AttemptSignal adapters get, so no AbortController is made per attempt.
 */
export class AttemptControl extends Cancellation implements AttemptSignal {
  /** The transport wrote this attempt's whole request to the upstream (requestSent). */
  sent = false;
  /** The prompt's usage as the provider reported it before any content (promptReported); undefined: none. */
  reportedPrompt: Usage | undefined = undefined;
  /** What the adapter's converter could not send (parametersUnsent). */
  unsent: readonly string[] = NONE;
  private timer: NodeJS.Timeout | undefined;
  private armed = false;
  private readonly onIdle = () => {
    if (this.armed) this.abort(new AttemptTimeout(`no answer within ${this.timeoutMs} ms`));
  };
  private readonly onCallerAbort = () => this.abort(this.caller.reason);

  constructor(private readonly caller: CallerSignal, private readonly timeoutMs: number) {
    super();
    if (caller.aborted) this.abort(caller.reason);
    else caller.addEventListener('abort', this.onCallerAbort, { once: true });
  }

  get timedOut() {
    return this.reason instanceof AttemptTimeout;
  }

  override abort(reason: unknown) {
    if (this.aborted) return;
    this.clearTimer();
    super.abort(reason);
  }

  requestSent() {
    this.sent = true;
  }

  promptReported(usage: Usage) {
    this.reportedPrompt = usage;
  }

  parametersUnsent(names: readonly string[]) {
    this.unsent = names;
  }

  throwIfAborted() {
    if (this.aborted) throw this.reason;
  }

  /**
   * Starts (or restarts) the idle bound. A stream arms it before each part and disarms it after: the
   * timer object is made once per attempt and refreshed, not a setTimeout and clearTimeout per part;
   * a disarmed timer that fires does nothing (dispose and abort clear it for good).
   */
  arm() {
    this.armed = true;
    if (this.timer === undefined) this.timer = setTimeout(this.onIdle, this.timeoutMs);
    else this.timer.refresh();
  }

  disarm() {
    this.armed = false;
  }

  private clearTimer() {
    this.armed = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  dispose() {
    this.clearTimer();
    this.caller.removeEventListener('abort', this.onCallerAbort);
  }
}
