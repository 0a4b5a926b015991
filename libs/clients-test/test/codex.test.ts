import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RecordedRequest } from '@gateway/testing';
import { OPENAI_MODEL, describeRun, runCli, startClientStack, type ClientStack } from '../src/index.js';

// Codex CLI (`codex exec`) against the gateway's Responses dialect, served by the OpenAI-compatible
// fake (the gateway turns Codex's Responses requests into chat completions): the fake asks Codex to run
// `echo` through its own shell tool, Codex runs it and sends the output back, the fake answers with
// text, and Codex prints it. The account pays exactly the usage the fake reported.

const require = createRequire(import.meta.url);
const CODEX = join(require.resolve('@openai/codex/package.json'), '..', 'bin', 'codex.js');
const FINAL_TEXT = 'The command printed what was expected.';
const KEY_ENV = 'GATEWAY_CLIENTS_TEST_KEY';

/** The tool messages of a chat-completions request (the fake's view of Codex's function_call_output). */
function toolMessages(request: RecordedRequest): any[] {
  return (request.body?.messages ?? []).filter((message: any) => message.role === 'tool');
}

function toolNames(request: RecordedRequest): string[] {
  return (request.body?.tools ?? []).map((tool: any) => tool.function?.name);
}

/**
 * The call of Codex's shell tool that prints `marker`, in the shape of whichever shell tool this
 * request offers (Codex picks one per model: `exec_command`, `shell_command` or `shell`).
 */
function shellCall(request: RecordedRequest, marker: string, workdir: string): { name: string; arguments: string } | undefined {
  const names = toolNames(request);
  if (names.includes('exec_command')) return { name: 'exec_command', arguments: JSON.stringify({ cmd: `echo ${marker}`, workdir }) };
  if (names.includes('shell_command')) return { name: 'shell_command', arguments: JSON.stringify({ command: `echo ${marker}`, workdir }) };
  if (names.includes('shell')) return { name: 'shell', arguments: JSON.stringify({ command: ['echo', marker], workdir }) };
  return undefined;
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

  it('runs its shell tool for the model through the gateway and is charged exactly the reported usage', async () => {
    const codexHome = join(home, 'codex-home');
    const workdir = join(home, 'work');
    await mkdir(codexHome);
    await mkdir(workdir);
    await writeFile(join(codexHome, 'config.toml'), `
model = "${OPENAI_MODEL}"
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
    const calls: string[] = [];
    fixture.openai.setFallback((request) => {
      const usage = fixture.reported(request);
      if (toolMessages(request).length > 0) return { text: FINAL_TEXT, usage };
      const call = shellCall(request, marker, workdir);
      if (!call) return { text: `no shell tool among ${toolNames(request).join(', ')}`, usage };
      const id = `call_shell${calls.length + 1}`;
      calls.push(id);
      return { toolCalls: [{ id, ...call }], usage };
    });

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
    const shown = `${describeRun('codex', run)}\n--- requests ---\n${JSON.stringify(fixture.openai.requests.map((r) => ({ path: r.path, body: r.body })), null, 1).slice(0, 30_000)}`;
    if (process.env.CLIENTS_TEST_DEBUG) console.log(shown);
    expect(run.code, shown).toBe(0);
    expect(run.stdout, shown).toContain(FINAL_TEXT);

    // One round trip: Codex ran the fake's shell call and sent its output back as the call's result.
    expect(calls, shown).toHaveLength(1);
    const results = fixture.openai.requests.flatMap(toolMessages);
    expect(results.map((message) => message.tool_call_id), shown).toEqual(calls);
    expect(JSON.stringify(results[0].content), shown).toContain(marker);

    await fixture.expectChargedExactly();
  });
});
