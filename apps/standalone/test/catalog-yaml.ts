import type { FakeUpstream } from '@gateway/testing';

// Catalog YAML for the e2e tests. `oneProviderCatalog`/`paidTextModel`: the process tests (chaos, crash),
// one startup, one OpenAI-wire provider in front of a fake upstream, and paid text models in one `default`
// limit group. `catalogYaml`/`catalogModelYaml`: any providers, limit groups and models, written from data.

/** A catalog with one startup and one provider (the fake upstream, its key read from `keyEnv`); `models` is the YAML of the model list. */
export function oneProviderCatalog(options: {
  startup: string; displayName: string; provider: string; upstream: FakeUpstream; keyEnv: string; perMinute: number; models: string[];
}): string {
  return `
startups:
  - { id: ${options.startup}, display_name: ${options.displayName} }
providers:
  - { id: ${options.provider}, kind: openai, base_url: ${options.upstream.url}, api_key_env: ${options.keyEnv} }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: ${options.perMinute} } }
models:
${options.models.join('')}`;
}

/**
 * One text model of that catalog, priced 0.000001 a prompt token and 0.000002 a completion token, with
 * its one offer; `extra` adds model fields (YAML lines at the model's indent).
 */
export function paidTextModel(model: { id: string; owner: string; provider: string; upstreamModel: string; endpoints: string[]; extra?: string[] }): string {
  const extra = (model.extra ?? []).map((line) => `    ${line}\n`).join('');
  return `  - id: ${model.id}
    owned_by: ${model.owner}
    created: 1767225600
${extra}    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [temperature, max_completion_tokens, stream_options]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:
      - { provider: ${model.provider}, upstream_model: ${model.upstreamModel}, endpoints: [${model.endpoints.join(', ')}] }
`;
}

/**
 * One provider line of a catalog: `url` and `keyEnv` for a provider over the network (none for `simulated`),
 * `extra` more YAML flow fields (`headers: { x-which: one }`).
 */
export interface CatalogProvider { id: string; kind: string; url?: string; keyEnv?: string; extra?: string }

/** One model of a catalog; what is left out is the common case of the e2e tests (owned by testco, text in and out, `default` limits). */
export interface CatalogModel {
  id: string;
  owner?: string;
  created?: number;
  inputModalities?: string[];
  outputModalities?: string[];
  contextWindow?: number;
  maxOutputTokens?: number;
  supportedParameters: string[];
  /** The reasoning levels the model accepts (`reasoning_efforts:`); none written unless given. */
  reasoningEfforts?: string[];
  /** The `pricing:` flow map (`tokenPricing(...)` for the two token prices); none for a free model. */
  pricing?: string;
  limitGroup?: string;
  offers: { provider: string; upstreamModel: string; endpoints: string[] }[];
}

/** A `pricing:` flow map with a prompt-token and a completion-token price (credits per token, as strings). */
export const tokenPricing = (input: string, output: string) => `{ per_input_token: "${input}", per_output_token: "${output}" }`;

/** The YAML of one model in a catalog's `models:` list (starting with its own line break). */
export function catalogModelYaml(model: CatalogModel): string {
  const list = (items: string[]) => `[${items.join(', ')}]`;
  return `
  - id: ${model.id}
    owned_by: ${model.owner ?? 'testco'}
    created: ${model.created ?? 1767225600}
    input_modalities: ${list(model.inputModalities ?? ['text'])}
    output_modalities: ${list(model.outputModalities ?? ['text'])}${model.contextWindow === undefined ? '' : `
    context_window: ${model.contextWindow}`}${model.maxOutputTokens === undefined ? '' : `
    max_output_tokens: ${model.maxOutputTokens}`}
    supported_parameters: ${list(model.supportedParameters)}${model.reasoningEfforts === undefined ? '' : `
    reasoning_efforts: ${list(model.reasoningEfforts)}`}${model.pricing === undefined ? '' : `
    pricing: ${model.pricing}`}
    limit_group: ${model.limitGroup ?? 'default'}
    offers:${model.offers.map((offer) => `
      - { provider: ${offer.provider}, upstream_model: ${offer.upstreamModel}, endpoints: ${list(offer.endpoints)} }`).join('')}`;
}

function providerYaml(provider: CatalogProvider): string {
  const fields = [`id: ${provider.id}`, `kind: ${provider.kind}`];
  if (provider.url !== undefined) fields.push(`base_url: ${provider.url}`);
  if (provider.keyEnv !== undefined) fields.push(`api_key_env: ${provider.keyEnv}`);
  if (provider.extra) fields.push(provider.extra);
  return `  - { ${fields.join(', ')} }\n`;
}

/**
 * A whole catalog: one startup (testco unless named), the providers, the limit groups (`tiers` as a YAML
 * flow map; one `default` group of 600 a minute at tier-1 unless given) and the models.
 */
export function catalogYaml(catalog: {
  startup?: { id: string; displayName: string };
  providers: CatalogProvider[];
  limitGroups?: { id: string; tiers: string }[];
  models: CatalogModel[];
}): string {
  const startup = catalog.startup ?? { id: 'testco', displayName: 'Test Co' };
  const groups = catalog.limitGroups ?? [{ id: 'default', tiers: '{ tier-1: { minute: 600 } }' }];
  return `
startups:
  - { id: ${startup.id}, display_name: ${startup.displayName} }
providers:
${catalog.providers.map(providerYaml).join('')}limit_groups:
${groups.map((group) => `  - id: ${group.id}\n    tiers: ${group.tiers}\n`).join('')}models:${catalog.models.map(catalogModelYaml).join('')}
`;
}
