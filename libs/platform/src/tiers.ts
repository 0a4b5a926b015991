/**
 * Account tiers (spec §2.8 names them; spec §8 leaves their assignment open): what Auth stores on an
 * account, what a catalog limit group may key its limits by, and what the edge offers a model to when
 * its limit group names no tier. One list, so Auth, the catalog and the edge cannot drift apart.
 */
export const ACCOUNT_TIERS = ['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4'] as const;

export type AccountTier = (typeof ACCOUNT_TIERS)[number];
