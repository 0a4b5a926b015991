import { decodeLearnedMap, encodeLearnedMap, LEARNED_KEY, learnedBucketOptions, type EventBus, type KeyValueBucket } from '@gateway/platform';

/**
 * The learned capability map as the bus holds it — the one key every routing replica reads and writes
 * (docs/providers.md "Learned capability map") — read and cleared the way an operator does with
 * `nats kv get` / a write of an empty map, through the bus's key-value port and the value's layout in
 * libs/platform. Tests see what a replica that starts now would take, without loading routing's code.
 */
export interface SharedLearnedMap {
  /**
   * What a request of `accountId` would go without on the pair by the shared value: the live confirmed
   * names and the live names this account itself was refused (sorted).
   */
  droppedFor(provider: string, upstreamModel: string, accountId: string): Promise<string[]>;
  /** Empties the map for every replica (a write of a map with no entries: replicas watching the key take it at once). */
  clear(): Promise<void>;
}

export async function openSharedLearnedMap(bus: Pick<EventBus, 'keyValue'>): Promise<SharedLearnedMap> {
  if (!bus.keyValue) throw new Error('this bus has no key-value port');
  const bucket: KeyValueBucket = await bus.keyValue(learnedBucketOptions());
  return {
    droppedFor: async (provider, upstreamModel, accountId) => {
      const now = Date.now();
      const entry = decodeLearnedMap((await bucket.get(LEARNED_KEY))?.value).find((each) => each.provider === provider && each.model === upstreamModel);
      if (entry === undefined) return [];
      const names = new Set(entry.expiresAt > now ? entry.names : []);
      for (const record of entry.evidence) if (record.account === accountId && record.expiresAt > now) names.add(record.name);
      return [...names].sort();
    },
    clear: async () => {
      // Compare-and-set, as a replica writes: a concurrent write is read again and cleared again.
      for (let attempt = 0; attempt < 8; attempt++) {
        const stored = await bucket.get(LEARNED_KEY);
        if (stored === undefined) return;
        if ((await bucket.update(LEARNED_KEY, encodeLearnedMap([]), stored.revision)) !== undefined) return;
      }
      throw new Error('learned capability map: could not clear it (too many concurrent writers)');
    },
  };
}
