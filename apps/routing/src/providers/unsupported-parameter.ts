import { canonicalNameOfWireField } from '@gateway/platform';

/**
 * Recognising a refusal that names one request parameter the upstream model does not take (issue 27,
 * item 8: the learned capability map). Each provider's `<kind>-error.ts` finds the name in its own
 * words; this module turns the provider's spelling of a field into the gateway's vocabulary (the
 * canonical names of libs/platform's PARAMETERS, which the learned map uses). A name with no gateway
 * meaning is kept as the provider spelled it: routing then looks for it among the request's extra_body
 * keys, and ignores it otherwise.
 */

/** Longest parameter name kept (a provider message could name anything). */
const MAX_NAME_LENGTH = 64;
/** A top-level field name, or one dotted step below it; never a path into messages or tools. */
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;

/** The gateway's name for a field the provider named, '' when it cannot be a request parameter at all. */
export function gatewayParameterName(providerName: string | null | undefined): string {
  if (!providerName || providerName.length > MAX_NAME_LENGTH || !FIELD_NAME.test(providerName)) return '';
  // The one vocabulary (libs/platform PARAMETERS): a learnable row's name; the request itself (messages,
  // tools, the output bound, ...) is never "a parameter the model lacks": dropping it would change the request.
  return canonicalNameOfWireField(providerName);
}

