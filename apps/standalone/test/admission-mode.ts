/**
 * The edge admission every end-to-end test runs with: `GATEWAY_TEST_ADMISSION=ledger|leased`, default
 * leased (the product default). `npm test` runs the suite once per mode, so both keep the same
 * guarantees (402 rule, overspend bounds, 429 with Retry-After, key credit limits, exactly-once charges).
 */
export type AdmissionMode = 'ledger' | 'leased';

function modeFromEnv(): AdmissionMode {
  const value = process.env.GATEWAY_TEST_ADMISSION ?? 'leased';
  if (value !== 'ledger' && value !== 'leased') throw new Error(`GATEWAY_TEST_ADMISSION must be ledger or leased: ${value}`);
  return value;
}

export const testAdmission: AdmissionMode = modeFromEnv();
