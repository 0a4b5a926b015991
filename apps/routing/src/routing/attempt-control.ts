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
    this.disarm();
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

  arm() {
    this.disarm();
    this.timer = setTimeout(() => this.abort(new AttemptTimeout(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
  }

  disarm() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  dispose() {
    this.disarm();
    this.caller.removeEventListener('abort', this.onCallerAbort);
  }
}
