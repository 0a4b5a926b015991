import { randomUUID } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { AuditChainVerifier, parseCredits, PRICING_FIELDS, type AuditChainBreak, type PromiseClient } from '@gateway/platform';
import type { Account, ApiKey, AuditEntry, Budget, AuthServiceClient, CatalogServiceClient, JobsServiceClient, LedgerServiceClient, Model, ReadAuthAuditChainRequest as ReadAuditChainRequest, ReadAuthAuditChainResponse as ReadAuditChainResponse } from '@gateway/proto';

/** What a command may use: lazily dialled clients and the two output streams. */
export interface CommandContext {
  auth(): PromiseClient<AuthServiceClient>;
  ledger(): PromiseClient<LedgerServiceClient>;
  catalog(): PromiseClient<CatalogServiceClient>;
  jobs(): PromiseClient<JobsServiceClient>;
  json: boolean;
  stdout(text: string): void;
  stderr(text: string): void;
}

export type OptionSpec = { type: 'string' | 'boolean'; description: string; placeholder?: string };

export interface Command {
  group: string;
  name: string;
  summary: string;
  /** Positional argument names; a trailing `?` marks an optional one. */
  positionals: string[];
  options: Record<string, OptionSpec>;
  /** Option names that must be given. */
  required?: string[];
  run(context: CommandContext, positionals: string[], values: Record<string, string | boolean | undefined>): Promise<number>;
}

/** Refused before any call is made; the CLI prints the message and the command's usage. */
export class UsageError extends Error {
  override name = 'UsageError';
}

const CALL_DEADLINE_MS = 15_000;
/** Changes gatewayctl makes are recorded in the audit log as gatewayctl's, with the local user when known. */
export const GATEWAYCTL_ACTOR = { kind: 'gatewayctl', id: (process.env.USER ?? process.env.LOGNAME ?? '').replace(/[^\x21-\x7e]/g, '?').slice(0, 100) };
/** The settings of a call that changes something (the audit log's actor). */
const CHANGE_CALL = { deadlineMs: CALL_DEADLINE_MS, actor: GATEWAYCTL_ACTOR };
/** A large catalog is validated and written in one call. */
const LOAD_DEADLINE_MS = 60_000;
/** The catalog service refuses bigger documents anyway (catalog DOCUMENT_BYTES_MAX). */
const DOCUMENT_BYTES_MAX = 4 * 1024 * 1024;
/** accounts list shows at most this many accounts. */
const ACCOUNTS_LIST_MAX = 10_000;
const BALANCE_CALLS_IN_FLIGHT = 8;
/** keys list walks pages of 100; an account with more keys than this is cut off with a note. */
const KEY_PAGES_MAX = 100;

const AUDIT_CHAINS = ['auth', 'ledger', 'catalog'] as const;
type AuditChain = (typeof AUDIT_CHAINS)[number];
/** ReadAuditChain's page bound. */
const AUDIT_PAGE = 1_000;

function credits(text: string, flag: string, { allowZero }: { allowZero: boolean }): string {
  let pico: bigint;
  try {
    pico = parseCredits(text);
  } catch {
    throw new UsageError(`${flag} must be a decimal number of credits with at most 12 decimals, got ${JSON.stringify(text)}`);
  }
  if (pico < 0n || (!allowZero && pico === 0n)) throw new UsageError(`${flag} must be ${allowZero ? '>= 0' : '> 0'}, got ${text}`);
  return text.trim();
}

const print = (context: CommandContext, value: unknown, line: string) =>
  context.stdout(context.json ? `${JSON.stringify(value)}\n` : `${line}\n`);

/** A listing's text: one line a row, or what there is none of. */
const listing = (lines: string[], none: string) => (lines.length > 0 ? lines.join('\n') : none);

const isoTime = (milliseconds: bigint) => (milliseconds > 0n ? new Date(Number(milliseconds)).toISOString() : null);

function keyJson(key: ApiKey | undefined) {
  return {
    key_id: key?.id ?? '',
    account_id: key?.accountId ?? '',
    name: key?.name ?? '',
    label: key?.label ?? '',
    disabled: key?.disabled ?? false,
    credit_limit: key?.creditLimit ?? null,
    limit_reset: key?.limitReset || null,
    default_routing_strategy: key?.defaultRoutingStrategy ?? '',
    created_at: isoTime(key?.createdAtMs ?? 0n),
    expires_at: key?.expiresAtMs === undefined ? null : isoTime(key.expiresAtMs),
  };
}

const isoSeconds = (seconds: bigint) => (seconds > 0n ? new Date(Number(seconds) * 1000).toISOString() : null);
/** batches list shows at most this many batches (pages of 100). */
const BATCHES_LIST_MAX = 1_000;

export const commands: Command[] = [
  {
    group: 'batches',
    name: 'list',
    summary: "An account's batches (OpenAI Batch and Anthropic Message Batches), newest first: kind, status, endpoint, request counts and the credits charged.",
    positionals: ['ACCOUNT_ID'],
    options: { limit: { type: 'string', description: `most batches shown (1..${BATCHES_LIST_MAX}, default 20)`, placeholder: 'N' } },
    async run(context, [accountId], values) {
      const limitText = (values.limit as string | undefined) ?? '20';
      const limit = Number(limitText);
      if (!/^\d+$/.test(limitText) || limit < 1 || limit > BATCHES_LIST_MAX) throw new UsageError(`--limit must be 1..${BATCHES_LIST_MAX}, got ${JSON.stringify(limitText)}`);
      const batches = [];
      let after = '';
      while (batches.length < limit) {
        const page = await context.jobs().listBatches({ accountId: accountId!, limit: Math.min(100, limit - batches.length), after, kind: '', before: '' }, { deadlineMs: CALL_DEADLINE_MS });
        batches.push(...page.batches);
        if (!page.hasMore || page.batches.length === 0) break;
        after = page.batches.at(-1)!.id;
      }
      const rows = batches.map((batch) => ({
        batch_id: batch.id,
        kind: batch.kind || 'batch',
        status: batch.status,
        endpoint: batch.endpoint,
        model: batch.model || null,
        total: batch.requestCounts?.total ?? 0,
        completed: batch.requestCounts?.completed ?? 0,
        failed: batch.requestCounts?.failed ?? 0,
        cost: batch.cost,
        created_at: isoSeconds(batch.createdAt),
        output_file_id: batch.outputFileId || null,
        error_file_id: batch.errorFileId || null,
      }));
      if (context.json) context.stdout(`${JSON.stringify({ batches: rows })}\n`);
      else if (rows.length === 0) context.stdout('no batches\n');
      else for (const row of rows) context.stdout(`${row.batch_id}  ${row.kind.padEnd(8)}  ${row.status.padEnd(10)}  ${row.endpoint}  ${row.completed}/${row.total} done, ${row.failed} failed  cost ${row.cost}  ${row.created_at}\n`);
      return 0;
    },
  },
  {
    group: 'accounts',
    name: 'create',
    summary: 'Create an account with its provisioning key, and optionally top it up.',
    positionals: [],
    required: ['name'],
    options: {
      name: { type: 'string', description: 'account name', placeholder: 'NAME' },
      credits: { type: 'string', description: 'initial credits (default: none)', placeholder: 'CREDITS' },
      tier: { type: 'string', description: 'rate-limit tier: free, tier-1 .. tier-4 (default: free)', placeholder: 'TIER' },
      'idempotency-key': { type: 'string', description: 'makes a retried create return the same account', placeholder: 'KEY' },
    },
    async run(context, _positionals, values) {
      const initialCredits = values.credits === undefined ? undefined : credits(String(values.credits), '--credits', { allowZero: true });
      const created = await context.auth().createAccount(
        {
          name: String(values.name),
          tier: values.tier === undefined ? 'free' : String(values.tier),
          idempotencyKey: values['idempotency-key'] === undefined ? `gatewayctl-account-${randomUUID()}` : String(values['idempotency-key']),
        },
        CHANGE_CALL,
      );
      const account = created.account;
      if (!account) throw new Error('auth answered CreateAccount without an account');
      const result = {
        account_id: account.id,
        name: account.name,
        tier: account.tier,
        provisioning_key: created.provisioningKey,
        balance: '0',
      };
      try {
        if (initialCredits !== undefined && parseCredits(initialCredits) > 0n) {
          // Keyed by the account: re-running after a failure here tops up once, not twice.
          const topUp = await context.ledger().topUp(
            { accountId: account.id, credits: initialCredits, idempotencyKey: `account-create:${account.id}`, note: 'initial credits (gatewayctl accounts create)' },
            CHANGE_CALL,
          );
          result.balance = topUp.balance;
        } else {
          result.balance = (await context.ledger().getBalance({ accountId: account.id }, { deadlineMs: CALL_DEADLINE_MS })).balance;
        }
      } catch (error) {
        // The account exists and its key is shown only once: print it before reporting the failure.
        print(context, { ...result, balance: null }, accountLines(result));
        throw error;
      }
      print(context, result, `${accountLines(result)}\nbalance: ${result.balance}`);
      return 0;
    },
  },
  {
    group: 'accounts',
    name: 'top-up',
    summary: 'Add credits to an account.',
    positionals: ['ACCOUNT_ID'],
    required: ['credits'],
    options: {
      credits: { type: 'string', description: 'credits to add (> 0)', placeholder: 'CREDITS' },
      'idempotency-key': { type: 'string', description: 'a repeat with the same key adds nothing (default: a new key)', placeholder: 'KEY' },
      note: { type: 'string', description: 'note kept with the journal entry', placeholder: 'TEXT' },
    },
    async run(context, [accountId], values) {
      const amount = credits(String(values.credits), '--credits', { allowZero: false });
      const idempotencyKey = values['idempotency-key'] === undefined ? `gatewayctl-top-up-${randomUUID()}` : String(values['idempotency-key']);
      const response = await context.ledger().topUp(
        { accountId: accountId!, credits: amount, idempotencyKey, note: values.note === undefined ? 'gatewayctl top-up' : String(values.note) },
        CHANGE_CALL,
      );
      print(
        context,
        { account_id: accountId, credits: amount, idempotency_key: idempotencyKey, balance: response.balance },
        `added ${amount} credits to ${accountId}; balance: ${response.balance}`,
      );
      return 0;
    },
  },
  {
    group: 'accounts',
    name: 'list',
    summary: 'List accounts, newest first, with their balances.',
    positionals: [],
    options: {
      limit: { type: 'string', description: `most accounts to show (1..${ACCOUNTS_LIST_MAX}, default 100)`, placeholder: 'N' },
    },
    async run(context, _positionals, values) {
      const limit = values.limit === undefined ? 100 : Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > ACCOUNTS_LIST_MAX) throw new UsageError(`--limit must be an integer from 1 to ${ACCOUNTS_LIST_MAX}`);
      const accounts: Account[] = [];
      let cursor = '';
      do {
        const page = await context.auth().listAccounts({ limit: Math.min(100, limit - accounts.length), cursor }, { deadlineMs: CALL_DEADLINE_MS });
        accounts.push(...page.accounts);
        cursor = page.nextCursor;
      } while (cursor !== '' && accounts.length < limit);
      // Balances a few at a time: the ledger answers each from one row.
      const balances: string[] = [];
      for (let start = 0; start < accounts.length; start += BALANCE_CALLS_IN_FLIGHT) {
        const batch = accounts.slice(start, start + BALANCE_CALLS_IN_FLIGHT);
        const answers = await Promise.all(batch.map((account) => context.ledger().getBalance({ accountId: account.id }, { deadlineMs: CALL_DEADLINE_MS })));
        balances.push(...answers.map((answer) => answer.balance));
      }
      const rows = accounts.map((account, index) => ({
        account_id: account.id,
        name: account.name,
        tier: account.tier,
        created_at: isoTime(account.createdAtMs),
        balance: balances[index]!,
      }));
      const truncated = cursor !== '';
      const lines = rows.map((row) => `${row.account_id}  ${row.name}  tier ${row.tier}  balance ${row.balance}  created ${row.created_at ?? '-'}`);
      if (truncated) lines.push(`(more accounts than ${rows.length}; raise --limit to see more)`);
      print(context, { accounts: rows, truncated }, listing(lines, 'no accounts'));
      return 0;
    },
  },
  {
    group: 'accounts',
    name: 'show',
    summary: 'Show an account and its balance.',
    positionals: ['ACCOUNT_ID'],
    options: {},
    async run(context, [accountId]) {
      const [{ account }, balance] = await Promise.all([
        context.auth().getAccount({ accountId: accountId! }, { deadlineMs: CALL_DEADLINE_MS }),
        context.ledger().getBalance({ accountId: accountId! }, { deadlineMs: CALL_DEADLINE_MS }),
      ]);
      const result = {
        account_id: account?.id ?? accountId,
        name: account?.name ?? '',
        tier: account?.tier ?? '',
        created_at: isoTime(account?.createdAtMs ?? 0n),
        balance: balance.balance,
        available: balance.available,
        reserved: balance.reserved,
      };
      print(
        context,
        result,
        `${result.account_id}  ${result.name}  tier ${result.tier}  created ${result.created_at ?? '-'}\n` +
          `balance: ${result.balance} (available ${result.available}, reserved ${result.reserved})`,
      );
      return 0;
    },
  },
  {
    group: 'keys',
    name: 'create',
    summary: 'Create an API key for an account (the key is shown once).',
    positionals: ['ACCOUNT_ID'],
    required: ['name'],
    options: {
      name: { type: 'string', description: 'key name', placeholder: 'NAME' },
      'credit-limit': { type: 'string', description: 'most credits the key may spend (default: no limit)', placeholder: 'CREDITS' },
      routing: { type: 'string', description: 'default routing strategy: reliability, balanced, latency, throughput, cache', placeholder: 'STRATEGY' },
      'limit-reset': { type: 'string', description: 'window of the credit limit: daily, weekly, monthly (UTC midnight; default: lifetime)', placeholder: 'WINDOW' },
      'expires-at': { type: 'string', description: 'ISO 8601 instant from which the key is refused (default: never)', placeholder: 'TIME' },
    },
    async run(context, [accountId], values) {
      const creditLimit =
        values['credit-limit'] === undefined ? undefined : credits(String(values['credit-limit']), '--credit-limit', { allowZero: true });
      let expiresAtMs: bigint | undefined;
      if (values['expires-at'] !== undefined) {
        const text = String(values['expires-at']);
        const at = /(Z|[+-]\d{2}:\d{2})$/i.test(text) ? Date.parse(text) : Number.NaN;
        if (!Number.isFinite(at)) throw new UsageError('--expires-at must be an ISO 8601 date-time with a time zone, e.g. 2027-01-31T23:59:59Z');
        expiresAtMs = BigInt(at);
      }
      const response = await context.auth().createApiKey(
        {
          accountId: accountId!,
          name: String(values.name),
          creditLimit,
          defaultRoutingStrategy: values.routing === undefined ? '' : String(values.routing),
          ...(values['limit-reset'] === undefined ? {} : { limitReset: String(values['limit-reset']) }),
          ...(expiresAtMs === undefined ? {} : { expiresAtMs }),
        },
        CHANGE_CALL,
      );
      const result = { ...keyJson(response.key), api_key: response.plaintext };
      print(context, result, `created key ${result.key_id} (${result.name}, ${result.label})\napi key: ${result.api_key}`);
      return 0;
    },
  },
  {
    group: 'keys',
    name: 'list',
    summary: "List an account's API keys, disabled ones included, newest first.",
    positionals: ['ACCOUNT_ID'],
    options: {},
    async run(context, [accountId]) {
      const keys: ApiKey[] = [];
      let cursor = '';
      let pages = 0;
      do {
        const page = await context.auth().listApiKeys(
          { accountId: accountId!, limit: 100, cursor, includeDisabled: true },
          { deadlineMs: CALL_DEADLINE_MS },
        );
        keys.push(...page.keys);
        cursor = page.nextCursor;
        pages += 1;
      } while (cursor !== '' && pages < KEY_PAGES_MAX);
      const truncated = cursor !== '';
      const rows = keys.map(keyJson);
      const lines = rows.map(
        (key) =>
          `${key.key_id}  ${key.name}  ${key.label}  ${key.disabled ? 'disabled' : 'enabled'}  limit ${key.credit_limit ?? 'none'}` +
          (key.default_routing_strategy ? `  routing ${key.default_routing_strategy}` : ''),
      );
      if (truncated) lines.push(`(more than ${rows.length} keys; list cut off)`);
      print(context, { account_id: accountId, keys: rows, truncated }, listing(lines, 'no keys'));
      return 0;
    },
  },
  keyStateCommand('disable'),
  keyStateCommand('enable'),
  {
    group: 'keys',
    name: 'delete',
    summary: 'Delete an API key permanently (it stops working at once; cannot be undone).',
    positionals: ['ACCOUNT_ID', 'KEY_ID'],
    options: {},
    async run(context, [accountId, keyId]) {
      const response = await context.auth().deleteApiKey({ accountId: accountId!, keyId: keyId! }, CHANGE_CALL);
      print(context, { account_id: accountId, key_id: keyId, deleted: response.deleted }, `deleted key ${keyId} of ${accountId}`);
      return 0;
    },
  },
  {
    group: 'catalog',
    name: 'show',
    summary: 'Show the catalog in force: every model (or one, by id or alias) with prices and offers.',
    positionals: ['MODEL?'],
    options: {},
    async run(context, [name]) {
      const models = name
        ? [(await context.catalog().getModel({ model: name }, { deadlineMs: CALL_DEADLINE_MS })).model].filter((model) => model !== undefined)
        : (await context.catalog().listModels({}, { deadlineMs: CALL_DEADLINE_MS })).models;
      if (context.json) {
        // Prices as JSON numbers written from the catalog's own decimal text (no float round trip), as /v1/models does.
        const rendered = JSON.stringify({ models: models.map(modelJson) }).replace(/"\\u0000price:([0-9.]+)"/g, '$1');
        context.stdout(`${rendered}\n`);
        return 0;
      }
      const lines = models.map((model) => {
        const prices = PRICING_FIELDS.filter(([field]) => model.pricing?.[field]).map(([field, label]) => `${label} ${model.pricing![field]}`);
        const offers = model.offers.map((offer) => `${offer.providerId}:${offer.upstreamModel} [${offer.endpoints.join(', ')}]`);
        return [
          `${model.id}  ${model.displayName}  context ${model.contextWindow}${model.maxOutputTokens !== undefined ? `  max output ${model.maxOutputTokens}` : ''}  limit group ${model.limitGroup}`,
          `  prices: ${prices.length > 0 ? prices.join(', ') : 'free'}`,
          `  offers: ${offers.join('; ')}`,
          ...(model.aliases.length > 0 ? [`  aliases: ${model.aliases.join(', ')}`] : []),
        ].join('\n');
      });
      context.stdout(`${listing(lines, 'no models')}\n`);
      return 0;
    },
  },
  {
    group: 'catalog',
    name: 'load',
    summary: 'Validate a config file (YAML) and make it the catalog in force.',
    positionals: ['FILE'],
    options: {
      'dry-run': { type: 'boolean', description: 'validate only; change nothing' },
    },
    async run(context, [file], values) {
      const path = resolve(file!);
      let document: string;
      try {
        const info = await stat(path);
        if (!info.isFile()) throw new UsageError(`${file} is not a file`);
        if (info.size > DOCUMENT_BYTES_MAX) throw new UsageError(`${file} is larger than ${DOCUMENT_BYTES_MAX} bytes`);
        document = await readFile(path, 'utf8');
      } catch (error) {
        if (error instanceof UsageError) throw error;
        throw new UsageError(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
      }
      const dryRun = values['dry-run'] === true;
      // The absolute path lets the service resolve icon files named relative to the config file.
      const response = await context.catalog().loadCatalog({ document, source: path, dryRun }, { deadlineMs: LOAD_DEADLINE_MS, actor: GATEWAYCTL_ACTOR });
      const result = {
        file: path,
        version: response.version,
        changed: response.changed,
        model_count: response.modelCount,
        dry_run: dryRun,
        problems: response.problems.map((problem) => ({ path: problem.path, reason: problem.reason })),
      };
      if (result.problems.length > 0) {
        if (context.json) context.stdout(`${JSON.stringify(result)}\n`);
        context.stderr(
          `${file}: ${result.problems.length} problem${result.problems.length === 1 ? '' : 's'}; the catalog in force is unchanged\n` +
            result.problems.map((problem) => `${problem.path}: ${problem.reason}\n`).join(''),
        );
        return 1;
      }
      const state = dryRun ? 'is valid (dry run, nothing changed)' : result.changed ? 'loaded' : 'unchanged (already in force)';
      print(context, result, `${file}: ${state}; version ${result.version}, ${result.model_count} models`);
      return 0;
    },
  },
  {
    group: 'ledger',
    name: 'verify',
    summary: 'Recompute balances from the journal; exit 1 when any differs.',
    positionals: ['ACCOUNT_ID?'],
    options: {},
    async run(context, [accountId]) {
      const response = await context.ledger().verifyJournal({ accountId: accountId ?? '' }, { deadlineMs: LOAD_DEADLINE_MS });
      const mismatches = response.mismatches.map((mismatch) => ({
        account_id: mismatch.accountId,
        stored_balance: mismatch.storedBalance,
        journal_balance: mismatch.journalBalance,
      }));
      const lines = [
        `${response.accountsChecked} account${response.accountsChecked === 1 ? '' : 's'} checked, ${mismatches.length} mismatch${mismatches.length === 1 ? '' : 'es'}`,
        ...mismatches.map((mismatch) => `${mismatch.account_id}: stored ${mismatch.stored_balance}, journal ${mismatch.journal_balance}`),
      ];
      print(context, { accounts_checked: response.accountsChecked, mismatches }, lines.join('\n'));
      return mismatches.length > 0 ? 1 : 0;
    },
  },
  {
    group: 'budgets',
    name: 'set',
    summary: 'Create or replace the budget of an account or of one of its keys (docs/governance.md).',
    positionals: ['ACCOUNT_ID'],
    required: ['period', 'limit'],
    options: {
      key: { type: 'string', description: 'the key\'s budget instead of the account\'s', placeholder: 'KEY_ID' },
      period: { type: 'string', description: 'daily, weekly or monthly (UTC)', placeholder: 'PERIOD' },
      limit: { type: 'string', description: 'credits per period (> 0)', placeholder: 'CREDITS' },
      thresholds: { type: 'string', description: 'alert percents, comma-separated (default 50,80,100; "" for none)', placeholder: 'LIST' },
      'hard-stop': { type: 'boolean', description: 'refuse (402 budget_exceeded) what would pass the limit' },
    },
    async run(context, [accountId], values) {
      const limit = credits(String(values.limit), '--limit', { allowZero: false });
      const thresholds = values.thresholds === undefined ? [50, 80, 100] : parsePercents(String(values.thresholds));
      const keyId = values.key === undefined ? '' : String(values.key);
      // The ledger does not know which account owns a key: Auth answers NOT_FOUND for another account's.
      if (keyId !== '') await context.auth().getApiKey({ accountId: accountId!, keyId }, { deadlineMs: CALL_DEADLINE_MS });
      const { budget } = await context.ledger().setBudget(
        { accountId: accountId!, keyId, period: String(values.period), limit, thresholds, hardStop: values['hard-stop'] === true },
        CHANGE_CALL,
      );
      const row = budgetJson(budget);
      print(context, row, budgetLine(row));
      return 0;
    },
  },
  {
    group: 'budgets',
    name: 'list',
    summary: 'Show an account\'s budgets with this period\'s spend and fired thresholds, and its latest alerts.',
    positionals: ['ACCOUNT_ID'],
    options: {},
    async run(context, [accountId]) {
      const listed = await context.ledger().listBudgets({ accountId: accountId! }, { deadlineMs: CALL_DEADLINE_MS });
      const rows = listed.budgets.map(budgetJson);
      const alerts = listed.alerts.map((alert) => ({
        event_id: alert.eventId, key_id: alert.keyId || null, period: alert.period, period_start: alert.periodStart,
        threshold: alert.thresholdPercent, limit: alert.limit, spent: alert.spent, fired_at: isoTime(alert.firedAtMs), delivery_state: alert.deliveryState,
      }));
      const lines = [...rows.map(budgetLine), ...alerts.map((alert) => `alert ${alert.threshold}% of ${alert.key_id ?? 'account'} ${alert.period} ${alert.period_start} at ${alert.fired_at} (${alert.delivery_state})`)];
      print(context, { budgets: rows, alerts }, listing(lines, 'no budgets'));
      return 0;
    },
  },
  {
    group: 'budgets',
    name: 'delete',
    summary: 'Remove the budget of an account or of one of its keys.',
    positionals: ['ACCOUNT_ID'],
    options: {
      key: { type: 'string', description: 'the key\'s budget instead of the account\'s', placeholder: 'KEY_ID' },
    },
    async run(context, [accountId], values) {
      const keyId = values.key === undefined ? '' : String(values.key);
      await context.ledger().deleteBudget({ accountId: accountId!, keyId }, CHANGE_CALL);
      print(context, { account_id: accountId, key_id: keyId || null, deleted: true }, `deleted the ${keyId === '' ? 'account' : `key ${keyId}`} budget of ${accountId}`);
      return 0;
    },
  },
  {
    group: 'audit',
    name: 'verify',
    summary: 'Walk every audit chain (auth, ledger, catalog) and check each entry\'s hash and link; exit 1 naming the first bad entry.',
    positionals: [],
    options: {},
    async run(context) {
      const results: Array<{ chain: string; entries_checked: number; head_seq: string; first_bad: AuditChainBreak | null }> = [];
      for (const chain of AUDIT_CHAINS) {
        const verifier = new AuditChainVerifier(chain);
        let afterSeq = 0n;
        let head = { seq: 0n, hash: '' };
        // Pages until one comes back short; the head of the last page is the one checked.
        for (;;) {
          const page = await readChain(context, chain, { afterSeq, limit: AUDIT_PAGE, accountId: '' });
          head = { seq: page.headSeq, hash: page.headHash };
          for (const entry of page.entries) verifier.add(entry);
          const last = page.entries[page.entries.length - 1];
          if (!last || page.entries.length < AUDIT_PAGE || verifier.firstBreak) break;
          afterSeq = last.seq;
        }
        const broken = verifier.firstBreak ?? verifier.finish(head.seq, head.hash);
        results.push({ chain, entries_checked: verifier.entriesChecked, head_seq: head.seq.toString(), first_bad: broken ?? null });
      }
      const bad = results.filter((result) => result.first_bad !== null);
      const lines = results.map((result) =>
        result.first_bad
          ? `${result.chain}: BROKEN at seq ${result.first_bad.seq}: ${result.first_bad.reason} (${result.entries_checked} entries good before it)`
          : `${result.chain}: ok, ${result.entries_checked} entries, head seq ${result.head_seq}`,
      );
      print(
        context,
        { ok: bad.length === 0, chains: results.map((result) => ({ ...result, first_bad: result.first_bad && { ...result.first_bad, seq: result.first_bad.seq.toString() } })) },
        lines.join('\n'),
      );
      return bad.length > 0 ? 1 : 0;
    },
  },
  {
    group: 'audit',
    name: 'list',
    summary: 'Show audit entries of one chain, oldest first (optionally one account\'s only).',
    positionals: [],
    required: ['chain'],
    options: {
      chain: { type: 'string', description: `the chain: ${AUDIT_CHAINS.join(' or ')}`, placeholder: 'CHAIN' },
      account: { type: 'string', description: 'only this account\'s entries', placeholder: 'ACCOUNT_ID' },
      'after-seq': { type: 'string', description: 'entries after this seq (default 0: from the first)', placeholder: 'SEQ' },
      limit: { type: 'string', description: `most entries (1..${AUDIT_PAGE}, default 100)`, placeholder: 'N' },
    },
    async run(context, _positionals, values) {
      const chain = String(values.chain);
      if (!(AUDIT_CHAINS as readonly string[]).includes(chain)) throw new UsageError(`--chain must be one of ${AUDIT_CHAINS.join(', ')}`);
      const limit = values.limit === undefined ? 100 : Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > AUDIT_PAGE) throw new UsageError(`--limit must be an integer from 1 to ${AUDIT_PAGE}`);
      const afterText = values['after-seq'] === undefined ? '0' : String(values['after-seq']);
      if (!/^\d{1,18}$/.test(afterText)) throw new UsageError('--after-seq must be a non-negative integer');
      const page = await readChain(context, chain as AuditChain, { afterSeq: BigInt(afterText), limit, accountId: values.account === undefined ? '' : String(values.account) });
      const rows = page.entries.map(auditJson);
      const lines = rows.map((row) => `${row.chain}#${row.seq} ${row.occurred_at} ${row.action} ${row.target_type}:${row.target_id} by ${row.actor_kind}${row.actor_id ? `:${row.actor_id}` : ''}${row.account_id ? ` account ${row.account_id}` : ''}`);
      print(context, { chain, entries: rows, head_seq: page.headSeq.toString(), head_hash: page.headHash }, listing(lines, 'no entries'));
      return 0;
    },
  },
];

function accountLines(result: { account_id: string; name: string; tier: string; provisioning_key: string }): string {
  const key = result.provisioning_key === '' ? '(not shown: this create was a replay of an earlier one)' : result.provisioning_key;
  return `created account ${result.account_id} (${result.name}, ${result.tier})\nprovisioning key: ${key}`;
}

/** `keys disable` and `keys enable`: one update of the key's disabled flag, effective at once on every edge. */
function keyStateCommand(name: 'disable' | 'enable'): Command {
  const disabled = name === 'disable';
  return {
    group: 'keys',
    name,
    summary: disabled ? 'Disable an API key (it stops working at once).' : 'Enable a disabled API key again.',
    positionals: ['ACCOUNT_ID', 'KEY_ID'],
    options: {},
    async run(context, [accountId, keyId]) {
      const response = await context.auth().updateApiKey(
        { accountId: accountId!, keyId: keyId!, disabled, clearCreditLimit: false },
        CHANGE_CALL,
      );
      const result = keyJson(response.key);
      print(context, result, `${name}d key ${result.key_id || keyId} of ${accountId}`);
      return 0;
    },
  };
}


/** A model in the field names of GET /v1/models (spec §2.6), plus what only operators see: offers. */
function modelJson(model: Model) {
  const pricing: Record<string, string> = {};
  for (const [field, name] of PRICING_FIELDS) {
    const text = model.pricing?.[field]?.trim();
    // A placeholder replaced by the bare decimal after JSON.stringify.
    if (text && /^\d+(\.\d+)?$/.test(text)) pricing[name] = `\u0000price:${text}`;
  }
  return {
    id: model.id,
    display_name: model.displayName,
    description: model.description,
    owned_by: model.ownedBy ?? null,
    created: Number(model.created),
    context_window: model.contextWindow,
    max_output_tokens: model.maxOutputTokens ?? null,
    supported_endpoints: [...new Set(model.offers.flatMap((offer) => offer.endpoints))],
    pricing,
    architecture: { input_modalities: model.inputModalities, output_modalities: model.outputModalities },
    supported_parameters: model.supportedParameters,
    aliases: model.aliases,
    limit_group: model.limitGroup,
    expires_at: model.expiresAt === undefined ? null : Number(model.expiresAt),
    offers: model.offers.map((offer) => ({ provider: offer.providerId, upstream_model: offer.upstreamModel, endpoints: offer.endpoints })),
  };
}


function readChain(context: CommandContext, chain: AuditChain, request: ReadAuditChainRequest): Promise<ReadAuditChainResponse> {
  const settings = { deadlineMs: LOAD_DEADLINE_MS };
  if (chain === 'auth') return context.auth().readAuthAuditChain(request, settings);
  return chain === 'ledger' ? context.ledger().readLedgerAuditChain(request, settings) : context.catalog().readCatalogAuditChain(request, settings);
}

function auditJson(entry: AuditEntry) {
  return {
    chain: entry.chain,
    seq: entry.seq.toString(),
    occurred_at: isoTime(entry.occurredAtMs),
    actor_kind: entry.actorKind,
    actor_id: entry.actorId,
    account_id: entry.accountId,
    action: entry.action,
    target_type: entry.targetType,
    target_id: entry.targetId,
    before: entry.beforeJson,
    after: entry.afterJson,
    request_id: entry.requestId,
    source_address: entry.sourceAddress,
    prev_hash: entry.prevHash,
    hash: entry.hash,
  };
}

function parsePercents(text: string): number[] {
  if (text.trim() === '') return [];
  return text.split(',').map((part) => {
    const value = Number(part.trim());
    if (!Number.isInteger(value) || value < 1 || value > 100) throw new UsageError(`--thresholds must be whole percents from 1 to 100, got ${JSON.stringify(part)}`);
    return value;
  });
}

function budgetJson(budget: Budget | undefined) {
  return {
    account_id: budget?.accountId ?? '',
    key_id: budget?.keyId || null,
    period: budget?.period ?? '',
    limit: budget?.limit ?? '',
    thresholds: budget?.thresholds ?? [],
    hard_stop: budget?.hardStop ?? false,
    spent: budget?.spent ?? '0',
    period_start: budget?.periodStart ?? '',
    fired_thresholds: budget?.firedThresholds ?? [],
  };
}

function budgetLine(row: ReturnType<typeof budgetJson>): string {
  return `${row.key_id ?? 'account'} ${row.period} budget ${row.limit} (spent ${row.spent} since ${row.period_start}; thresholds ${row.thresholds.join(',') || 'none'}, fired ${row.fired_thresholds.join(',') || 'none'}${row.hard_stop ? ', hard stop' : ''})`;
}
