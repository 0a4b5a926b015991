import { setFlagsFromString } from 'node:v8';

let same: ((a: object, b: object) => boolean) | undefined;

/**
 * Whether V8 gives two objects one hidden class (Map). Objects a hot path makes per request should:
 * a fresh hidden class per object costs old-space Maps and kept request graphs alive through
 * young-generation GCs (docs/performance.md). Uses V8's %HaveSameMap, enabled for functions compiled
 * after this first call.
 */
export function sameHiddenClass(a: object, b: object): boolean {
  if (!same) {
    setFlagsFromString('--allow-natives-syntax');
    same = new Function('a', 'b', 'return %HaveSameMap(a, b);') as (a: object, b: object) => boolean;
  }
  return same(a, b);
}
