import { ProviderError } from '../provider-adapter.js';
import { openAIHttpError } from '../openai/openai-error.js';

/**
 * Azure OpenAI's error answers onto ProviderErrors. The OpenAI mapping covers most of them: 401/403/404
 * (a wrong key, an unknown deployment `DeploymentNotFound`, a missing api-version) are misconfigured,
 * 408/429/5xx overloaded, `content_filter` (a prompt Azure's content filter blocked) content_filter.
 * Two 400s are about our configuration rather than the caller's request, so they move on to another
 * provider instead of reaching the caller as a refusal: an api-version Azure does not serve, and a
 * deployment whose model cannot do the operation (`OperationNotSupported`, e.g. chat on an embeddings
 * deployment).
 */
export function azureOpenAIHttpError(status: number, bodyText: string): ProviderError {
  const error = openAIHttpError(status, bodyText);
  if (error.kind !== 'rejected') return error;
  if (/api[- ]version/i.test(error.providerMessage) || bodyText.includes('"OperationNotSupported"')) {
    return new ProviderError('misconfigured', error.providerMessage, status);
  }
  return error;
}
