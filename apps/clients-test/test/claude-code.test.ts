import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ANTHROPIC_MODEL, OPENAI_MODEL, callTool, describeRun, runCli, startClientStack, toolLoop, type ClientStack, type UpstreamKind,
} from '../src/index.js';

// Claude Code (`claude -p`) against the gateway's Messages dialect, served by the Anthropic-wire fake
// and (through the gateway's conversion) by the OpenAI-compatible fake: the fake asks Claude Code to Read a file it alone knows the path of, Claude Code runs its own Read
// tool and sends the file's text back as a tool_result, the fake answers with text, and Claude Code
// prints it. The account pays exactly the usage the fake reported over every request Claude Code made.

const require = createRequire(import.meta.url);
// The package's own launcher: it runs the platform package's native binary (bin/claude.exe is that binary
// only when the postinstall script ran; the launcher works either way).
const CLAUDE = join(require.resolve('@anthropic-ai/claude-code/package.json'), '..', 'cli-wrapper.cjs');
const FINAL_TEXT = 'The file says the gateway works.';

describe('Claude Code', () => {
  let fixture: ClientStack;
  let home: string;

  beforeAll(async () => {
    fixture = await startClientStack('claude-code');
    home = await mkdtemp(join(tmpdir(), 'gateway-claude-code-'));
  });

  afterAll(async () => {
    await fixture?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  const cases: Array<{ kind: UpstreamKind; model: string }> = [
    { kind: 'anthropic', model: ANTHROPIC_MODEL },
    { kind: 'openai', model: OPENAI_MODEL },
  ];

  it.each(cases)('runs its Read tool for a model on the $kind fake and is charged exactly the reported usage', async ({ kind, model }) => {
    const before = fixture.reportedUsage.length;
    const workdir = join(home, `work-${kind}`);
    const configDir = join(home, `config-${kind}`);
    await mkdir(workdir);
    await mkdir(configDir);
    const secretPath = join(workdir, 'note.txt');
    const secret = `note-${Date.now()}-contents`;
    await writeFile(secretPath, `${secret}\n`);

    const loop = toolLoop(fixture, kind, { call: callTool('Read', { file_path: secretPath }), finalText: FINAL_TEXT });

    const run = await runCli(process.execPath, [
      CLAUDE,
      '-p', 'Read the file note.txt and tell me what it says.',
      '--output-format', 'json',
      '--model', model,
      '--allowedTools', 'Read',
      '--max-turns', '4',
    ], {
      cwd: workdir,
      timeoutMs: 150_000,
      env: {
        PATH: process.env.PATH,
        HOME: home,
        CLAUDE_CONFIG_DIR: configDir,
        ANTHROPIC_BASE_URL: fixture.url,
        ANTHROPIC_API_KEY: fixture.apiKey,
        ANTHROPIC_SMALL_FAST_MODEL: model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
        ANTHROPIC_DEFAULT_SONNET_MODEL: model,
        ANTHROPIC_DEFAULT_OPUS_MODEL: model,
        DISABLE_AUTOUPDATER: '1',
        DISABLE_TELEMETRY: '1',
        DISABLE_ERROR_REPORTING: '1',
        DISABLE_BUG_COMMAND: '1',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
        NO_PROXY: '127.0.0.1,localhost',
      },
    });
    const shown = `${describeRun('claude', run)}\n--- requests ---\n${JSON.stringify(fixture[kind].requests.map((r) => ({ path: r.path, body: r.body })), null, 1).slice(0, 20_000)}`;
    expect(run.code, shown).toBe(0);
    expect(() => JSON.parse(run.stdout), shown).not.toThrow();
    const result = JSON.parse(run.stdout) as { type: string; subtype: string; is_error: boolean; result: string; usage: unknown };
    expect(result, shown).toMatchObject({ type: 'result', subtype: 'success', is_error: false });
    expect(result.result, shown).toContain(FINAL_TEXT);

    // One round trip: the fake's Read call was run by Claude Code, and the file's text came back to it.
    expect(loop.calls, shown).toHaveLength(1);
    expect(loop.results, shown).toHaveLength(1);
    expect(loop.results[0], shown).toContain(secret);
    // Claude Code's own account of the run is the usage the fake reported, passed through unchanged.
    const reported = fixture.reportedUsage.slice(before);
    expect(result.usage, shown).toMatchObject({
      input_tokens: reported.reduce((sum, one) => sum + one.prompt_tokens, 0),
      output_tokens: reported.reduce((sum, one) => sum + one.completion_tokens, 0),
    });

    if (process.env.CLIENTS_TEST_DEBUG) console.log(shown);
    await fixture.expectChargedExactly();
  });
});
