import type { Logger } from '@gateway/platform';
import type { CatalogCache } from '../catalog/catalog-cache.js';
import type { GenAiTelemetry } from '../observability/gen-ai-telemetry.js';
import type { ProviderHealth } from '../strategies/index.js';
import type { UsagePublisher } from '../usage/usage-publisher.js';
import type { AttemptObserver } from './attempt-observer.js';
import type { LearnedCapabilities } from './learned-capabilities.js';

/** What the Router is built with; a leaf module, so candidates, failover and routing-core all read it without a cycle. */
export interface RouterOptions {
  catalog: CatalogCache;
  health: ProviderHealth;
  usage: UsagePublisher;
  logger: Logger;
  /** Per provider attempt: whole answer (Chat) or time to the first and between stream parts (ChatStream). */
  attemptTimeoutMs: number;
  /** Most provider attempts per request, failovers included. */
  maxAttempts: number;
  random?: () => number;
  /** Counts provider attempts and failovers (metrics). */
  attempts?: AttemptObserver;
  /** Each attempt's OpenTelemetry GenAI span and client metrics (observability/gen-ai-telemetry.ts). */
  genAi?: GenAiTelemetry;
  /** Parameters upstream models refused, per provider × upstream model (learned-capabilities.ts). */
  learned?: LearnedCapabilities;
}
