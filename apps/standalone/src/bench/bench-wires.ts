/**
 * The provider wires the bench can serve its model over (`--wire`): the same exchange reaches the bench's
 * fast upstream as an OpenAI chat completion, a Gemini generateContent or a Bedrock Converse call, each
 * through its own catalog provider and model, so the gateway's CPU per request can be compared by wire.
 */

export const WIRES = ['openai', 'gemini', 'bedrock'] as const;
export type WireName = (typeof WIRES)[number];

/** The static test credentials the bench configures (the fast upstream checks they are sent, never signatures). */
export const BENCH_GEMINI_API_KEY = 'bench-gemini-key';
export const BENCH_AWS_ACCESS_KEY_ID = 'AKIABENCHBENCHBENCH0';
export const BENCH_AWS_SECRET_ACCESS_KEY = 'bench/secret/bench/secret/bench/secret/0';
export const BENCH_AWS_REGION = 'us-east-1';
/** Bedrock model ids hold a colon; the adapter must escape it in the path (and sign the escaped path). */
export const BEDROCK_UPSTREAM_MODEL = 'bench.upstream-model-v1:0';

/** The catalog model id of the bench model on `wire` (the OpenAI wire keeps the historical one). */
export function wireModel(baseModel: string, wire: WireName): string {
  return wire === 'openai' ? baseModel : `${baseModel}-${wire}`;
}

/**
 * `--wire a,b`: the wires to measure, the OpenAI wire always first (the one the others are compared with,
 * and the one compared with the bare proxy). Absent: the OpenAI wire alone.
 */
export function parseWires(text: string | undefined): WireName[] {
  const named = (text ?? 'openai').split(',').map((name) => name.trim()).filter(Boolean);
  for (const name of named) if (!(WIRES as readonly string[]).includes(name)) throw new Error(`--wire takes wires among ${WIRES.join(', ')}; got ${name}`);
  if (new Set(named).size !== named.length) throw new Error('--wire needs distinct wires');
  return ['openai', ...(named as WireName[]).filter((name) => name !== 'openai')];
}

/** The provider and model entries of the bench catalog for the wires beyond OpenAI, as YAML lines. */
export function wireCatalogYaml(upstreamOrigin: string, baseModel: string, wires: readonly WireName[]): { providers: string; models: string } {
  let providers = '';
  let models = '';
  const model = (wire: WireName, provider: string, upstreamModel: string) => `  - id: ${wireModel(baseModel, wire)}
    owned_by: bench
    display_name: Bench Chat (${wire} wire)
    description: The bench's model, served over the ${wire} wire.
    created: 1767225600
    context_window: 128000
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [temperature, max_completion_tokens, max_tokens, stream_options]
    pricing: { per_input_token: "0.0000005", per_output_token: "0.0000015" }
    limit_group: bench
    offers:
      - { provider: ${provider}, upstream_model: "${upstreamModel}", endpoints: [chat.completions, messages, responses] }
`;
  if (wires.includes('gemini')) {
    providers += `  - id: bench-gemini
    kind: gemini
    base_url: ${upstreamOrigin}/v1beta
    api_key_env: BENCH_GEMINI_API_KEY
`;
    models += model('gemini', 'bench-gemini', 'bench-upstream-model');
  }
  if (wires.includes('bedrock')) {
    providers += `  - id: bench-bedrock
    kind: bedrock
    region: ${BENCH_AWS_REGION}
    base_url: ${upstreamOrigin}
    access_key_id_env: BENCH_AWS_ACCESS_KEY_ID
    secret_access_key_env: BENCH_AWS_SECRET_ACCESS_KEY
`;
    models += model('bedrock', 'bench-bedrock', BEDROCK_UPSTREAM_MODEL);
  }
  return { providers, models };
}

/** Environment routing needs for the wires' providers: static test credentials, so every request is signed. */
export function wireRoutingEnv(wires: readonly WireName[]): Record<string, string> {
  return {
    ...(wires.includes('gemini') ? { BENCH_GEMINI_API_KEY } : {}),
    ...(wires.includes('bedrock') ? { BENCH_AWS_ACCESS_KEY_ID, BENCH_AWS_SECRET_ACCESS_KEY } : {}),
  };
}
