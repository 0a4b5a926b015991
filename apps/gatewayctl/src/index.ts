import { parseArgs } from 'node:util';
import {
  createClient,
  ErrorReason,
  fromServiceError,
  GatewayError,
  grpcAddress,
  GrpcStatus,
  readAdminToken,
  readRuntimeAddresses,
  ADMIN_TOKEN_FILE,
  RUNTIME_ADDRESSES_FILE,
  type PromiseClient,
  type RuntimeAddresses,
} from '@gateway/platform';
import {
  AuthServiceClient,
  AuthServiceService,
  CatalogServiceClient,
  CatalogServiceService,
  JobsServiceClient,
  JobsServiceService,
  LedgerServiceClient,
  LedgerServiceService,
} from '@gateway/proto';
import { commands, UsageError, type Command, type CommandContext, type OptionSpec } from './commands.js';

export interface GatewayctlIo {
  env: NodeJS.ProcessEnv;
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

const SERVICES = {
  auth: { flag: 'auth', env: 'AUTH_ADDR', fallback: '127.0.0.1:50051' },
  ledger: { flag: 'ledger', env: 'LEDGER_ADDR', fallback: '127.0.0.1:50053' },
  catalog: { flag: 'catalog', env: 'CATALOG_ADDR', fallback: '127.0.0.1:50052' },
  jobs: { flag: 'jobs', env: 'JOBS_ADDR', fallback: '127.0.0.1:50056' },
} as const;
type ServiceName = keyof typeof SERVICES;

const GLOBAL_OPTIONS: Record<string, OptionSpec> = {
  json: { type: 'boolean', description: 'print JSON instead of text' },
  auth: { type: 'string', description: 'auth service address (env AUTH_ADDR, default 127.0.0.1:50051)', placeholder: 'HOST:PORT' },
  ledger: { type: 'string', description: 'ledger service address (env LEDGER_ADDR, default 127.0.0.1:50053)', placeholder: 'HOST:PORT' },
  catalog: { type: 'string', description: 'catalog service address (env CATALOG_ADDR, default 127.0.0.1:50052)', placeholder: 'HOST:PORT' },
  jobs: { type: 'string', description: 'jobs service address (env JOBS_ADDR, default 127.0.0.1:50056)', placeholder: 'HOST:PORT' },
  'data-dir': {
    type: 'string',
    description: `a running npm start's data dir, whose ${RUNTIME_ADDRESSES_FILE} names the addresses no flag or env gives and whose ${ADMIN_TOKEN_FILE} is the admin credential when GATEWAY_ADMIN_TOKEN is unset (env GATEWAY_DATA_DIR, default .data)`,
    placeholder: 'DIR',
  },
  help: { type: 'boolean', description: 'show help' },
};

function commandUsage(command: Command): string {
  const positionals = command.positionals.map((name) => (name.endsWith('?') ? `[${name.slice(0, -1)}]` : name));
  const required = (command.required ?? []).map((name) => `--${name} ${command.options[name]?.placeholder ?? 'VALUE'}`);
  const optionLines = Object.entries({ ...command.options, ...GLOBAL_OPTIONS }).map(([name, spec]) => {
    const flag = spec.type === 'string' ? `--${name} ${spec.placeholder ?? 'VALUE'}` : `--${name}`;
    return `  ${flag.padEnd(28)} ${spec.description}${command.required?.includes(name) ? ' (required)' : ''}`;
  });
  return [
    `usage: gatewayctl ${command.group} ${command.name} ${[...positionals, ...required, '[options]'].join(' ')}`,
    '',
    command.summary,
    '',
    'options:',
    ...optionLines,
  ].join('\n');
}

function overview(group?: string): string {
  const listed = commands.filter((command) => group === undefined || command.group === group);
  const width = Math.max(...listed.map((command) => `${command.group} ${command.name}`.length));
  return [
    `usage: gatewayctl ${group ?? '<group>'} <command> [arguments] [options]`,
    '',
    'Admin CLI of the gateway; talks gRPC to the auth, ledger, catalog and jobs services.',
    '',
    'commands:',
    ...listed.map((command) => `  ${`${command.group} ${command.name}`.padEnd(width)}  ${command.summary}`),
    '',
    'Run `gatewayctl <group> <command> --help` for a command\'s options.',
  ].join('\n');
}

function describeError(error: GatewayError, service: ServiceName | undefined, address: string | undefined): string {
  if (error.status === GrpcStatus.UNAVAILABLE || error.status === GrpcStatus.DEADLINE_EXCEEDED) {
    return `cannot reach ${service ?? 'the service'}${address ? ` at ${address}` : ''}: ${error.message}`;
  }
  if (error.status === GrpcStatus.UNAUTHENTICATED || error.status === GrpcStatus.PERMISSION_DENIED) {
    return `${service ?? 'the service'} refused the call: ${error.message}; set GATEWAY_ADMIN_TOKEN to the gateway's admin credential`;
  }
  const reason = ErrorReason[error.reason]?.replace(/^ERROR_REASON_/, '') ?? String(error.reason);
  const statusName = GrpcStatus[error.status] ?? String(error.status);
  return `${error.message} (${statusName}/${reason}${error.param ? `, ${error.param}` : ''})`;
}

/**
 * Runs one gatewayctl command and answers its exit code: 0 success, 1 any error (usage, refused by a
 * service, unreachable service, catalog problems, journal mismatches). Never calls process.exit.
 */
export async function runGatewayctl(argv: string[], io: GatewayctlIo): Promise<number> {
  // The command words are the first two positionals; global flags may come before them.
  const wordIndexes: number[] = [];
  for (let index = 0; index < argv.length && wordIndexes.length < 2; index++) {
    const token = argv[index]!;
    if (token === '--') break;
    if (token.startsWith('-')) {
      const flag = token.replace(/^--?/, '');
      if (GLOBAL_OPTIONS[flag]?.type === 'string') index++;
      continue;
    }
    wordIndexes.push(index);
  }
  const [group, name] = wordIndexes.map((index) => argv[index]!);
  const rest = argv.filter((_token, index) => !wordIndexes.includes(index));
  const wantsHelp = argv.includes('--help') || argv.includes('-h');
  if (group === undefined) {
    if (wantsHelp) {
      io.stdout(`${overview()}\n`);
      return 0;
    }
    io.stderr(`${overview()}\n`);
    return 1;
  }
  const inGroup = commands.filter((command) => command.group === group);
  if (inGroup.length === 0) {
    io.stderr(`gatewayctl: unknown command group "${group}"\n\n${overview()}\n`);
    return 1;
  }
  const command = inGroup.find((candidate) => candidate.name === name);
  if (!command) {
    if (name === undefined && wantsHelp) {
      io.stdout(`${overview(group)}\n`);
      return 0;
    }
    io.stderr(`gatewayctl: ${name === undefined ? `${group} needs a command` : `unknown command "${group} ${name}"`}\n\n${overview(group)}\n`);
    return 1;
  }
  if (wantsHelp) {
    io.stdout(`${commandUsage(command)}\n`);
    return 0;
  }

  const fail = (message: string) => {
    io.stderr(`gatewayctl ${command.group} ${command.name}: ${message}\n`);
    return 1;
  };
  const usageFail = (message: string) => fail(`${message}\n\n${commandUsage(command)}`);

  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    const options = Object.fromEntries(
      Object.entries({ ...command.options, ...GLOBAL_OPTIONS }).map(([option, spec]) => [option, { type: spec.type }]),
    ) as Record<string, { type: 'string' | 'boolean' }>;
    const parsed = parseArgs({ args: rest, options, allowPositionals: true, strict: true });
    values = parsed.values as Record<string, string | boolean | undefined>;
    positionals = parsed.positionals;
  } catch (error) {
    return usageFail((error as Error).message);
  }
  const requiredPositionals = command.positionals.filter((positional) => !positional.endsWith('?'));
  if (positionals.length < requiredPositionals.length) {
    return usageFail(`missing ${requiredPositionals.slice(positionals.length).join(' ')}`);
  }
  if (positionals.length > command.positionals.length) {
    return usageFail(`unexpected argument "${positionals[command.positionals.length]}"`);
  }
  if (positionals.some((positional) => positional.trim() === '')) return usageFail('arguments must not be empty');
  for (const option of command.required ?? []) {
    if (values[option] === undefined || values[option] === '') return usageFail(`--${option} is required`);
  }

  // Each address: its flag, else its env var, else what a running `npm start` wrote into its data dir,
  // else the multi-process stack's fixed port.
  const dataDir = (values['data-dir'] as string | undefined) ?? io.env.GATEWAY_DATA_DIR ?? '.data';
  let running: RuntimeAddresses | undefined;
  // The admin credential every call carries: GATEWAY_ADMIN_TOKEN (the first, if it lists several), else npm start's file.
  let credential: string | undefined;
  try {
    running = readRuntimeAddresses(dataDir);
    credential = io.env.GATEWAY_ADMIN_TOKEN?.split(',')[0]?.trim() || readAdminToken(dataDir);
  } catch (error) {
    return fail((error as Error).message);
  }
  const addresses = {} as Record<ServiceName, string>;
  for (const [service, source] of Object.entries(SERVICES) as [ServiceName, (typeof SERVICES)[ServiceName]][]) {
    const address = (values[source.flag] as string | undefined) ?? io.env[source.env] ?? running?.[service] ?? source.fallback;
    if (!grpcAddress.safeParse(address).success) {
      return usageFail(`${values[source.flag] !== undefined ? `--${source.flag}` : source.env}: expected host:port, got "${address}"`);
    }
    addresses[service] = address;
  }

  const opened: { close(): void }[] = [];
  // Which service an error came from, so "cannot reach" names the right one when calls run in parallel.
  const failedService = new WeakMap<object, ServiceName>();
  const lazily = <Client extends object & { close(): void }>(service: ServiceName, open: () => Client) => {
    let client: Client | undefined;
    return () => {
      if (!client) {
        const raw = open();
        opened.push(raw);
        client = new Proxy(raw, {
          get(target, property, receiver) {
            const value: unknown = Reflect.get(target, property, receiver);
            if (typeof value !== 'function' || property === 'close') return value;
            return (...args: unknown[]) => {
              const result: unknown = value.apply(target, args);
              if (!(result instanceof Promise)) return result;
              return result.catch((error: unknown) => {
                if (error !== null && typeof error === 'object') failedService.set(error, service);
                throw error;
              });
            };
          },
        });
      }
      return client;
    };
  };
  const context: CommandContext = {
    auth: lazily('auth', (): PromiseClient<AuthServiceClient> => createClient(AuthServiceClient, AuthServiceService, addresses.auth, { credential })),
    ledger: lazily('ledger', (): PromiseClient<LedgerServiceClient> => createClient(LedgerServiceClient, LedgerServiceService, addresses.ledger, { credential })),
    catalog: lazily('catalog', (): PromiseClient<CatalogServiceClient> => createClient(CatalogServiceClient, CatalogServiceService, addresses.catalog, { credential })),
    jobs: lazily('jobs', (): PromiseClient<JobsServiceClient> => createClient(JobsServiceClient, JobsServiceService, addresses.jobs, { credential })),
    json: values.json === true,
    stdout: io.stdout,
    stderr: io.stderr,
  };
  try {
    return await command.run(context, positionals, values);
  } catch (error) {
    if (error instanceof UsageError) return usageFail(error.message);
    const service = error !== null && typeof error === 'object' ? failedService.get(error) : undefined;
    return fail(describeError(fromServiceError(error), service, service ? addresses[service] : undefined));
  } finally {
    for (const client of opened) client.close();
  }
}
