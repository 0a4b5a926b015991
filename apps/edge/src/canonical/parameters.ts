import type { CatalogModel } from '../catalog-cache.js';

/**
 * THE table of forwarded parameters (DESIGN §6): each canonical request field a model may lack, with
 * the `supported_parameters` names (OpenRouter's vocabulary, used by the catalog) that mean the model
 * has it. Each dialect maps its own spelling to these fields (see its converter); a field whose model
 * lists none of its names is dropped before any provider (spec §1) and reported in
 * `x-gateway-dropped-params` in the dialect's spelling.
 */
export const SUPPORTED_NAMES = {
  tools: ['tools'],
  tool_choice: ['tool_choice'],
  response_format: ['response_format', 'structured_outputs'],
  temperature: ['temperature'],
  top_p: ['top_p'],
  top_k: ['top_k'],
  stop: ['stop'],
  max_output_tokens: ['max_completion_tokens', 'max_tokens'],
  reasoning: ['reasoning_effort', 'reasoning'],
  presence_penalty: ['presence_penalty'],
  frequency_penalty: ['frequency_penalty'],
  parallel_tool_calls: ['parallel_tool_calls'],
  prediction: ['prediction'],
  web_search_options: ['web_search_options'],
  image_config: ['image_config'],
} as const satisfies Record<string, readonly string[]>;

export type CanonicalParameter = keyof typeof SUPPORTED_NAMES;

export function modelSupports(model: CatalogModel, parameter: CanonicalParameter): boolean {
  for (const name of SUPPORTED_NAMES[parameter]) if (model.supportedParameters.has(name)) return true;
  return false;
}

/**
 * One request's forwarding decisions: `forward` says whether a present field goes on, and remembers
 * the dialect's name of each one that does not.
 */
export class ParameterGate {
  private readonly dropped: string[] = [];

  constructor(private readonly model: CatalogModel) {}

  forward(parameter: CanonicalParameter, dialectName: string): boolean {
    if (modelSupports(this.model, parameter)) return true;
    this.dropped.push(dialectName);
    return false;
  }

  /** A dialect field never passed to providers (accepted in the shape only). */
  drop(dialectName: string): void {
    this.dropped.push(dialectName);
  }

  droppedParams(): string[] {
    return [...new Set(this.dropped)].sort();
  }
}
