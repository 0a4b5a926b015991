import OpenAI from 'openai';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';
import { ctlJson, type StackOnCatalog } from './configured-stack.js';

// What the background-response e2e files share: a catalog of one paid text model behind one OpenAI-wire
// fake upstream (chat completions and responses), and an account with a key and an `openai` client.

/** One model `model`, priced `priceIn`/`priceOut` a token, served by `upstream-one` at `upstreamUrl` (key in `keyEnv`). */
export function oneTextModelCatalog(options: { model: string; upstreamModel: string; upstreamUrl: string; keyEnv: string; priceIn: string; priceOut: string }): string {
  return catalogYaml({
    providers: [{ id: 'upstream-one', kind: 'openai', url: options.upstreamUrl, keyEnv: options.keyEnv }],
    models: [{
      id: options.model,
      contextWindow: 8000,
      maxOutputTokens: 100,
      supportedParameters: ['temperature', 'max_completion_tokens'],
      pricing: tokenPricing(options.priceIn, options.priceOut),
      offers: [{ provider: 'upstream-one', upstreamModel: options.upstreamModel, endpoints: ['chat.completions', 'responses'] }],
    }],
  });
}

/** A new account with `credits`, a key of it, and an `openai` client on the stack with that key. */
export async function openAiAccount(stack: StackOnCatalog['stack'], name: string, credits: string): Promise<{ accountId: string; client: OpenAI }> {
  const created = await ctlJson(stack, 'accounts', 'create', '--name', name, '--credits', credits, '--tier', 'tier-1', '--json');
  const apiKey = (await ctlJson(stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
  return { accountId: created.account_id!, client: new OpenAI({ baseURL: `${stack.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 }) };
}
