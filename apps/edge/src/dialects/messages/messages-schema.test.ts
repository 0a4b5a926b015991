import { describe, expect, it } from 'vitest';
import { parseCountTokensRequest, parseMessagesRequest } from './messages-schema.js';
import { refusalOf } from '../../../test/refusal.js';

const base = { model: 'testco/m', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] };

function refusal(body: unknown, parse: (body: unknown) => unknown = parseMessagesRequest) {
  return refusalOf(() => parse(body));
}

describe('messages request schema', () => {
  it('accepts every field of the wire reference', () => {
    const body = parseMessagesRequest({
      ...base,
      max_tokens: 4096,
      system: [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral', ttl: '1h' } }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look', cache_control: { type: 'ephemeral' } },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0K' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
            { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' }, title: 'a.pdf', context: 'ctx' },
            { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'plain' } },
            { type: 'document', source: { type: 'url', url: 'https://example.com/a.pdf' }, citations: { enabled: true } },
            { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'inner' }] } },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'redacted_thinking', data: 'opaque' },
            { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { q: 1 } },
          ],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'r' }], is_error: true }] },
        { role: 'system', content: 'mid-conversation instruction' },
      ],
      tools: [{ name: 'lookup', description: 'd', input_schema: { type: 'object' }, cache_control: { type: 'ephemeral' }, strict: true }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      thinking: { type: 'enabled', budget_tokens: 1024 },
      output_config: { effort: 'high', format: { type: 'json_schema', schema: { type: 'object' } } },
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      stop_sequences: ['END'],
      stream: true,
      metadata: { user_id: 'u-1' },
      service_tier: 'auto',
      cache_control: { type: 'ephemeral' },
    });
    expect(body.messages).toHaveLength(4);
    expect(body.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
  });

  it('requires max_tokens on /v1/messages but not on count_tokens', () => {
    const { max_tokens: _omitted, ...withoutMax } = base;
    expect(refusal(withoutMax)).toMatchObject({ status: 400, param: 'body.max_tokens', message: expect.stringMatching(/^body\.max_tokens: /) });
    expect(parseCountTokensRequest(withoutMax).messages).toHaveLength(1);
  });

  it('names the field path of a bad block, a bad role, an out-of-range sampling value', () => {
    expect(refusal({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'video', url: 'x' }] }] }).param).toBe(
      'body.messages.0.content.1.type',
    );
    expect(refusal({ ...base, messages: [{ role: 'tool', content: 'x' }] }).param).toBe('body.messages.0.role');
    expect(refusal({ ...base, temperature: 1.5 }).param).toBe('body.temperature');
    expect(refusal({ ...base, messages: [{ role: 'user', content: [] }] }).param).toBe('body.messages.0.content');
    expect(refusal({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'AA' } }] }] }).param).toBe(
      'body.messages.0.content.0.source.media_type',
    );
  });

  it('refuses a thinking budget under 1024 or not below max_tokens', () => {
    expect(refusal({ ...base, thinking: { type: 'enabled', budget_tokens: 512 } }).param).toBe('body.thinking.budget_tokens');
    const tooBig = refusal({ ...base, max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 2000 } });
    expect(tooBig.param).toBe('body.thinking.budget_tokens');
    expect(tooBig.message).toContain('less than max_tokens (2000)');
  });

  it('keeps unknown top-level fields (for extra parameters) and drops unknown fields inside blocks', () => {
    const body = parseMessagesRequest({ ...base, custom_knob: 3, messages: [{ role: 'user', content: [{ type: 'text', text: 'a', someday_field: 1 }] }] });
    expect((body as Record<string, unknown>).custom_knob).toBe(3);
    expect(body.messages[0]!.content).toEqual([{ type: 'text', text: 'a' }]);
  });
});
