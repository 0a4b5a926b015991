import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeAzureOpenAIUpstream, type FakeAzureOpenAIUpstream } from './fake-azure-openai-upstream.js';

function sseData(text: string) {
  return text.split('\n\n').filter((event) => event.startsWith('data: ')).map((event) => event.slice(6));
}

describe('fake Azure OpenAI resource', () => {
  let azure: FakeAzureOpenAIUpstream;
  const chatBody = { model: 'gpt-4o', messages: [{ role: 'user', content: 'hello' }] };
  const post = (path: string, body: unknown, headers: Record<string, string> = { 'api-key': azure.apiKey }) =>
    fetch(`${azure.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const refusal = async (response: Response) => ({ status: response.status, error: ((await response.json()) as any).error });

  beforeAll(async () => { azure = await startFakeAzureOpenAIUpstream(); });
  afterAll(() => azure.close());
  beforeEach(() => azure.reset());

  it('answers a deployment URL with the api-version, and the v1 URL with the deployment in the body', async () => {
    const dated = await post('/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21', { messages: chatBody.messages });
    expect(dated.status).toBe(200);
    const json = (await dated.json()) as any;
    expect(json.model).toBe('gpt-4o');
    expect(json.prompt_filter_results[0].content_filter_results.violence.filtered).toBe(false);
    expect(json.choices[0].message.content).toBe('Hello from the fake Azure OpenAI resource.');
    const v1 = await post('/openai/v1/chat/completions', chatBody);
    expect(v1.status).toBe(200);
    expect(((await v1.json()) as any).choices[0].finish_reason).toBe('stop');
  });

  it('refuses a missing or wrong api-key with Azure\'s 401; a bearer key only on the v1 API', async () => {
    const dated = '/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21';
    for (const [path, headers] of [
      ['/openai/v1/chat/completions', {}], ['/openai/v1/chat/completions', { 'api-key': 'wrong' }], ['/openai/v1/chat/completions', { authorization: 'Bearer wrong' }],
      [dated, {}], [dated, { authorization: `Bearer ${azure.apiKey}` }],
    ] as const) {
      const { status, error } = await refusal(await post(path, chatBody, headers));
      expect(status, `${path} ${JSON.stringify(headers)}`).toBe(401);
      expect(error.code).toBe('401');
      expect(error.message).toMatch(/^Access denied due to invalid subscription key or wrong API endpoint/);
    }
    expect((await post('/openai/v1/chat/completions', chatBody, { authorization: `Bearer ${azure.apiKey}` })).status).toBe(200);
  });

  it('refuses a deployment URL without api-version (404), with one it does not serve (400), and an unknown deployment (404)', async () => {
    expect(await refusal(await post('/openai/deployments/gpt-4o/chat/completions', chatBody))).toEqual({ status: 404, error: { code: '404', message: 'Resource not found' } });
    expect(await refusal(await post('/openai/deployments/gpt-4o/chat/completions?api-version=2019-01-01', chatBody)))
      .toEqual({ status: 400, error: { code: 'BadRequest', message: 'API version not supported' } });
    expect((await refusal(await post('/openai/deployments/nope/chat/completions?api-version=2024-10-21', chatBody))).error.code).toBe('DeploymentNotFound');
    expect((await refusal(await post('/openai/v1/chat/completions', { ...chatBody, model: 'nope' }))).status).toBe(404);
  });

  it('has no moderations, and refuses an operation the deployment\'s model cannot do', async () => {
    expect((await refusal(await post('/openai/v1/moderations', { model: 'gpt-4o', input: 'x' }))).status).toBe(404);
    expect((await refusal(await post('/openai/deployments/gpt-4o/moderations?api-version=2024-10-21', { input: 'x' }))).status).toBe(404);
    const wrong = await refusal(await post('/openai/deployments/text-embedding-3-small/chat/completions?api-version=2024-10-21', chatBody));
    expect(wrong.status).toBe(400);
    expect(wrong.error.code).toBe('OperationNotSupported');
  });

  it('streams Azure\'s prompt_filter_results chunk first, and scripts both content-filter refusals', async () => {
    azure.script({ text: 'abcdef', chunkCount: 3 });
    const events = sseData(await (await post('/openai/v1/chat/completions', { ...chatBody, stream: true })).text());
    const first = JSON.parse(events[0]!);
    expect(first).toMatchObject({ id: '', choices: [] });
    expect(first.prompt_filter_results).toHaveLength(1);
    expect(events.at(-1)).toBe('[DONE]');

    azure.script({ contentFilter: 'prompt' });
    const prompt = await refusal(await post('/openai/v1/chat/completions', chatBody));
    expect([prompt.status, prompt.error.code, prompt.error.innererror.code]).toEqual([400, 'content_filter', 'ResponsibleAIPolicyViolation']);

    azure.script({ contentFilter: 'output' });
    const output = (await (await post('/openai/v1/chat/completions', chatBody)).json()) as any;
    expect(output.choices[0].finish_reason).toBe('content_filter');
    expect(output.choices[0].message.content).toBeUndefined();
  });
});
