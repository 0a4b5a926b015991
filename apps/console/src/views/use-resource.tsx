import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { errorText } from '../api.js';
import { useLoad } from './use-load.js';

/**
 * A view's resource and the changes made to it (budgets, webhooks, members): loaded whenever `deps` change
 * and again after each change. `act` runs one change: the last alert and notice clear, then the notice
 * says what it did (`done`) or the alert shows the route's refusal in its words; it reloads either way and
 * answers whether the change succeeded.
 */
export function useResource<T>(load: () => Promise<T>, deps: unknown[]) {
  const [generation, setGeneration] = useState(0);
  const { data, error: loadError } = useLoad(load, [generation, ...deps]);
  const [error, setError] = useState<string>();
  const [notice, setNotice] = useState<string>();
  const reload = () => setGeneration((count) => count + 1);

  const act = async <A,>(change: () => Promise<A>, done: string | ((answer: A) => string)): Promise<boolean> => {
    setError(undefined);
    setNotice(undefined);
    let succeeded = false;
    try {
      const answer = await change();
      setNotice(typeof done === 'string' ? done : done(answer));
      succeeded = true;
    } catch (failure) {
      setError(errorText(failure));
    }
    reload();
    return succeeded;
  };

  /** A refusal met outside `act` (a form's own call): shown as the alert, the notice cleared. */
  const setAlert = (message: string | undefined) => {
    setNotice(undefined);
    setError(message);
  };

  return { data, error: error ?? loadError, notice, generation, reload, act, setAlert };
}

/** The view's alert (a load's or a change's failure) and its notice (what a change did). */
export function Outcome({ error, notice }: { error?: string; notice?: string }) {
  return (
    <>
      {error && <p role="alert" class="error">{error}</p>}
      {notice && <p role="status" class="success">{notice}</p>}
    </>
  );
}

/**
 * A confirmation before a change that cannot be undone (delete, remove). Keyboard users land on its safe
 * choice, Cancel; give it a `key` per subject so that asking about another one focuses Cancel again.
 */
export function Confirm(props: { titleId: string; action: string; onConfirm: () => void; onCancel: () => void; children: ComponentChildren }) {
  const cancel = useRef<HTMLButtonElement>(null);
  useEffect(() => cancel.current?.focus(), []);
  return (
    <div role="alertdialog" aria-labelledby={props.titleId} class="card notice">
      <p id={props.titleId}>{props.children}</p>
      <button type="button" class="danger" onClick={props.onConfirm}>{props.action}</button>{' '}
      <button type="button" class="secondary" ref={cancel} onClick={props.onCancel}>Cancel</button>
    </div>
  );
}
