import { useEffect, useState } from 'preact/hooks';
import { errorText } from '../api.js';

/**
 * Loads whenever `deps` change: the error clears as a load starts, the data of the last load stays until
 * the new one arrives, and the answer of a load that was overtaken (or unmounted) is dropped.
 */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data?: T; error?: string } {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    let live = true;
    setError(undefined);
    load().then((answer) => live && setData(() => answer)).catch((failure) => live && setError(errorText(failure)));
    return () => { live = false; };
  }, deps);
  return { data, error };
}
