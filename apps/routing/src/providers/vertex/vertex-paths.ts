/**
 * The anthropic_version Claude on Vertex takes in the request body (Anthropic's Vertex SDK,
 * packages/vertex-sdk/src/client.ts, `DEFAULT_VERSION`; Google's Vertex docs for Claude name it too).
 */
export const VERTEX_ANTHROPIC_VERSION = 'vertex-2023-10-16';

/** The Gemini methods the Vertex adapter calls on `publishers/google/models/{model}`. */
export type VertexGeminiMethod = 'generateContent' | 'streamGenerateContent' | 'batchEmbedContents' | 'predict';

/**
 * The API root of a location when the config gives no base_url: the regional endpoint, and the shared
 * ones Anthropic's Vertex SDK also picks for `global` and the `us` / `eu` multi-regions.
 */
export function defaultVertexBaseUrl(location: string): string {
  switch (location) {
    case 'global':
      return 'https://aiplatform.googleapis.com';
    case 'us':
      return 'https://aiplatform.us.rep.googleapis.com';
    case 'eu':
      return 'https://aiplatform.eu.rep.googleapis.com';
    default:
      return `https://${location}-aiplatform.googleapis.com`;
  }
}

/** Claude models are Anthropic's publisher on Vertex; every other model is Google's (Gemini). */
export function isClaudeModel(upstreamModel: string): boolean {
  return upstreamModel.startsWith('claude');
}

/**
 * The request paths of one Vertex provider, built once per model:
 * `{base path}/v1/projects/{project}/locations/{location}/publishers/{anthropic|google}/models/{model}:{method}`.
 * A base URL written with `/v1` at its end works too.
 */
export class VertexPaths {
  readonly origin: string;
  private readonly publishers: string;
  private readonly claudePaths = new Map<string, readonly [string, string]>();
  private readonly geminiPaths = new Map<string, string>();

  constructor(baseUrl: string, project: string, location: string) {
    const url = new URL(baseUrl);
    this.origin = url.origin;
    const basePath = url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
    this.publishers = `${basePath}/v1/projects/${encodeURIComponent(project)}/locations/${encodeURIComponent(location)}/publishers`;
  }

  /** `:rawPredict` (one JSON answer) or `:streamRawPredict` (Anthropic's SSE). */
  readonly claude = (model: string, stream: boolean): string => {
    let paths = this.claudePaths.get(model);
    if (!paths) {
      const root = `${this.publishers}/anthropic/models/${model}`;
      paths = [`${root}:rawPredict`, `${root}:streamRawPredict`];
      this.claudePaths.set(model, paths);
    }
    return paths[stream ? 1 : 0];
  };

  /** `:generateContent`, `:streamGenerateContent` (the caller adds `?alt=sse`), `:predict` (embeddings) or `:batchEmbedContents`. */
  readonly gemini = (model: string, method: VertexGeminiMethod): string => {
    const key = `${method} ${model}`;
    let path = this.geminiPaths.get(key);
    if (!path) {
      path = `${this.publishers}/google/models/${model}:${method}`;
      this.geminiPaths.set(key, path);
    }
    return path;
  };
}
