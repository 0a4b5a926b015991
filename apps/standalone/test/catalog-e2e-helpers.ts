import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { RunningStack } from '../src/index.js';

export { gatewayctl, type CtlResult } from './stack-harness.js';
import { gatewayctl } from './stack-harness.js';

/** Shared by the catalog end-to-end files: gatewayctl against a stack, accounts with keys, temp configs. */

export interface TestAccount {
  accountId: string;
  provisioningKey: string;
  apiKey: string;
}

/**
 * An account made the way an operator makes one: `accounts create` (no credits), then a
 * `top-up` when `credits` is given (a balance of 0 is an account never topped up), then `keys create`.
 */
export async function createAccount(stack: RunningStack, name: string, options: { credits?: string; tier?: string } = {}): Promise<TestAccount> {
  const created = await gatewayctl(stack, 'accounts', 'create', '--name', name, ...(options.tier ? ['--tier', options.tier] : []), '--json');
  expect(created.code, created.stderr).toBe(0);
  const account = JSON.parse(created.stdout) as { account_id: string; provisioning_key: string };
  if (options.credits !== undefined) {
    const topUp = await gatewayctl(stack, 'accounts', 'top-up', account.account_id, '--credits', options.credits);
    expect(topUp.code, topUp.stderr).toBe(0);
  }
  const key = await gatewayctl(stack, 'keys', 'create', account.account_id, '--name', `${name}-key`, '--json');
  expect(key.code, key.stderr).toBe(0);
  return { accountId: account.account_id, provisioningKey: account.provisioning_key, apiKey: (JSON.parse(key.stdout) as { api_key: string }).api_key };
}

/** A scratch directory for config files written by a test. */
export async function scratchDirectory(prefix: string): Promise<{ path: string; write(name: string, text: string): Promise<string>; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), `${prefix}-`));
  return {
    path,
    write: async (name, text) => {
      const file = join(path, name);
      await writeFile(file, text, 'utf8');
      return file;
    },
    remove: () => rm(path, { recursive: true, force: true }),
  };
}

/** Spec §2.6 fields every listed model carries, and the parameters a listing never shows. */
export const MODEL_FIELDS = [
  'id',
  'object',
  'created',
  'owned_by',
  'display_name',
  'description',
  'context_window',
  'supported_endpoints',
  'pricing',
  'architecture',
  'supported_parameters',
  'available_tiers',
] as const;
export const UNLISTED_PARAMETERS = ['web_search_options', 'functions', 'function_call', 'logit_bias', 'logprobs', 'prediction'];

export interface ListedModel {
  id: string;
  object: string;
  created: number;
  owned_by: string | null;
  display_name: string;
  description: string;
  context_window: number;
  supported_endpoints: string[];
  pricing: Record<string, number>;
  architecture: { input_modalities: string[]; output_modalities: string[] };
  supported_parameters: string[];
  available_tiers: string[];
  aliases: string[];
  expires_at: number | null;
  expired: boolean;
  [field: string]: unknown;
}

export async function listModels(baseUrl: string, apiKey?: string): Promise<{ status: number; headers: Headers; data: ListedModel[] }> {
  const response = await fetch(`${baseUrl}/v1/models`, apiKey ? { headers: { authorization: `Bearer ${apiKey}` } } : {});
  const body = (await response.json()) as { object?: string; data?: ListedModel[] };
  if (response.status === 200) expect(body.object).toBe('list');
  return { status: response.status, headers: response.headers, data: body.data ?? [] };
}
