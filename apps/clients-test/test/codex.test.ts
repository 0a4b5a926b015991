import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ANTHROPIC_MODEL, OPENAI_MODEL, describeRun, runCli, startClientStack, toolLoop, type ClientStack, type ToolLoopScript, type UpstreamKind,
} from '../src/index.js';

// Codex CLI (`codex exec`) against the gateway's Responses dialect, served by the OpenAI-compatible fake
// and by the Anthropic-wire fake (the gateway turns Codex's Responses requests into chat completions or
// Messages requests): the fake asks Codex to run `echo` through its own shell tool, Codex runs it and
// sends the output back, the fake answers with text, and Codex prints it. The account pays exactly the usage the fake reported.

const require = createRequire(import.meta.url);
const CODEX = join(require.resolve('@openai/codex/package.json'), '..', 'bin', 'codex.js');
const FINAL_TEXT = 'The command printed what was expected.';
const KEY_ENV = 'GATEWAY_CLIENTS_TEST_KEY';

/**
 * The call of Codex's shell tool that prints `marker`, in the shape of whichever shell tool the request
 * offers (Codex picks one per model: `exec_command`, `shell_command` or `shell`).
 */
function shellCall(marker: string, workdir: string): ToolLoopScript['call'] {
  return (offered) => {
    if (offered.includes('exec_command')) return { name: 'exec_command', input: { cmd: `echo ${marker}`, workdir } };
    if (offered.includes('shell_command')) return { name: 'shell_command', input: { command: `echo ${marker}`, workdir } };
    if (offered.includes('shell')) return { name: 'shell', input: { command: ['echo', marker], workdir } };
    return undefined;
  };
}

describe('Codex CLI', () => {
  let fixture: ClientStack;
  let home: string;

  beforeAll(async () => {
    fixture = await startClientStack('codex');
    home = await mkdtemp(join(tmpdir(), 'gateway-codex-'));
  });

  afterAll(async () => {
    await fixture?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  const cases: Array<{ kind: UpstreamKind; model: string }> = [
    { kind: 'openai', model: OPENAI_MODEL },
    { kind: 'anthropic', model: ANTHROPIC_MODEL },
  ];

  it.each(cases)('runs its shell tool for a model on the $kind fake and is charged exactly the reported usage', async ({ kind, model }) => {
    const codexHome = join(home, `codex-home-${kind}`);
    const workdir = join(home, `work-${kind}`);
    await mkdir(codexHome);
    await mkdir(workdir);
    await writeFile(join(codexHome, 'config.toml'), `
model = "${model}"
model_provider = "gateway"
check_for_update_on_startup = false

[model_providers.gateway]
name = "Inference gateway"
base_url = "${fixture.url}/v1"
env_key = "${KEY_ENV}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`);
    const marker = `marker-${Date.now()}`;
    const loop = toolLoop(fixture, kind, { call: shellCall(marker, workdir), finalText: FINAL_TEXT });

    const run = await runCli(process.execPath, [
      CODEX, 'exec',
      '--skip-git-repo-check',
      '--sandbox', 'danger-full-access',
      '--color', 'never',
      '-C', workdir,
      'Run echo and tell me what it printed.',
    ], {
      cwd: workdir,
      timeoutMs: 150_000,
      env: {
        PATH: process.env.PATH,
        HOME: home,
        CODEX_HOME: codexHome,
        [KEY_ENV]: fixture.apiKey,
        NO_PROXY: '127.0.0.1,localhost',
        RUST_LOG: 'error',
      },
    });
    const shown = `${describeRun('codex', run)}\n--- requests ---\n${JSON.stringify(fixture[kind].requests.map((r) => ({ path: r.path, body: r.body })), null, 1).slice(0, 30_000)}`;
    if (process.env.CLIENTS_TEST_DEBUG) console.log(shown);
    expect(run.code, shown).toBe(0);
    expect(run.stdout, shown).toContain(FINAL_TEXT);

    // One round trip: Codex ran the fake's shell call and sent its output back as the call's result.
    expect(loop.calls, shown).toHaveLength(1);
    expect(loop.results, shown).toHaveLength(1);
    expect(loop.results[0], shown).toContain(marker);

    await fixture.expectChargedExactly();
  });
});
