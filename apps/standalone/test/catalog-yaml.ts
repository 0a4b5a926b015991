import type { FakeUpstream } from '@gateway/testing';

// Catalog YAML for the process tests (chaos, crash): one startup, one OpenAI-wire provider in front of
// a fake upstream, and paid text models in one `default` limit group.

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
