import type { Request, Response } from 'express';
import type { VerifyProvisioningKeyResponse } from '@gateway/proto';
import { requestIdOf, type EdgeContext } from '../context.js';
import { malformedProvisioningKey, presentedProvisioningKey } from '../credentials.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';

/**
 * /v1/account/* take a provisioning key only (spec §5): an API key there is refused by
 * Auth.VerifyProvisioningKey (401, type invalid_request_error per spec §4.14). Not cached: these
 * routes are rare and must see a revoked key at once.
 */
export async function verifyProvisioningKey(context: EdgeContext, request: Request, response: Response): Promise<VerifyProvisioningKeyResponse> {
  const key = presentedProvisioningKey(request);
  if (key === undefined) throw edgeErrors.missingProvisioningKey();
  if (key === '') throw malformedProvisioningKey();
  return context.auth.verifyProvisioningKey({ key }, { requestId: requestIdOf(response), deadlineMs: 5_000 });
}

/** GET /v1/account/balance (spec §4.14): `{balance}` as a decimal string. */
export function balanceHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await verifyProvisioningKey(context, request, response);
    const balance = await context.ledger.getBalance({ accountId: account.accountId }, { requestId: requestIdOf(response), deadlineMs: 5_000 });
    sendJson(response, 200, { balance: balance.balance });
  };
}
