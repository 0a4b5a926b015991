import type OpenAI from 'openai';

// What a Codex session looks like to the compaction tests (responses-compact, responses-compaction-trigger):
// its one tool and a short history with a tool round trip.

/** Codex's shell tool, as a Responses function tool. */
export const CODEX_SHELL_TOOL = {
  type: 'function', name: 'shell', description: 'Run a command.', parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] }, strict: false,
};

/** A Codex session so far: a request, a tool round trip, the answer. */
export const CODEX_HISTORY = [
  { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'List the files.' }] },
  { type: 'function_call', call_id: 'call_ls', name: 'shell', arguments: '{"cmd":"ls"}' },
  { type: 'function_call_output', call_id: 'call_ls', output: 'README.md\nsrc' },
  { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'There is a README and src.' }] },
] as OpenAI.Responses.ResponseInputItem[];
