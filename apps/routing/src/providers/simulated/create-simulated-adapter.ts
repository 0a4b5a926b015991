import type { Provider } from '@gateway/proto';
import type { ProviderAdapter } from '../provider-adapter.js';
import { InstructedStructuredOutput } from '../structured-output.js';
import { SimulatedAdapter } from './simulated-adapter.js';

/**
 * The adapter of a `kind: simulated` provider: built in, no network, no secrets. It has no native JSON
 * modes: they are instructed, and its answers checked against the schema (InstructedStructuredOutput).
 */
export function createSimulatedAdapter(provider: Provider): ProviderAdapter {
  return new InstructedStructuredOutput(new SimulatedAdapter(provider.id));
}
