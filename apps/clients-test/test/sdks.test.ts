import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool as agentTool } from '@openai/agents';
import { ChatAnthropic } from '@langchain/anthropic';
import { ChatOpenAI } from '@langchain/openai';
import { AIMessage, HumanMessage, ToolMessage, type BaseMessage } from '@langchain/core/messages';
import { tool as langchainTool } from '@langchain/core/tools';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool as aiTool, type LanguageModel } from 'ai';
import {
  ANTHROPIC_MODEL, OPENAI_MODEL, anthropicToolLoop, callTool, openAIToolLoop, startClientStack, type ClientStack, type ToolLoop,
} from '../src/index.js';

// Agent frameworks over the gateway, each running its own tool loop: the fake upstream calls the
// framework's function tool, the framework runs it and sends its result back, the fake finishes with
// text. OpenAI-side frameworks use the Responses API (served by the OpenAI-compatible fake through the
// gateway's conversion), Anthropic-side ones the Messages API (served by the Anthropic-wire fake).

const CITY = 'Lisbon';
const FINAL_TEXT = 'It is sunny in Lisbon today.';
const weatherOf = (city: string) => `forecast-${city}: sunny, 24C`;

describe('agent frameworks', () => {
  let fixture: ClientStack;
  const originalFetch = globalThis.fetch;
  /** Method and path of every inference request the frameworks sent to the gateway (through global fetch). */
  let gatewayCalls: string[] = [];

  beforeAll(async () => {
    setTracingDisabled(true);
    fixture = await startClientStack('sdks');
    // The clients below are made after this, so they all take this fetch (each SDK's default).
    globalThis.fetch = (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (url.origin === new URL(fixture.url).origin && !url.pathname.startsWith('/v1/account/')) {
        let streamed = false;
        try { streamed = typeof init?.body === 'string' && JSON.parse(init.body).stream === true; } catch { /* not JSON */ }
        gatewayCalls.push(`${init?.method ?? (input instanceof Request ? input.method : 'GET')} ${url.pathname}${streamed ? ' stream' : ''}`);
      }
      return originalFetch(input, init);
    };
  });

  afterAll(async () => {
    globalThis.fetch = originalFetch;
    await fixture?.stop();
  });

  beforeEach(() => {
    fixture.openai.reset();
    fixture.anthropic.reset();
    gatewayCalls = [];
  });

  /** The framework spoke the dialect it was asked to, streamed or not: the tool call's turn and the final one, nothing else. */
  function expectGatewayCalls(path: string, stream: boolean, shown: string): void {
    const call = `POST ${path}${stream ? ' stream' : ''}`;
    expect(gatewayCalls, shown).toEqual([call, call]);
  }

  /** The round trip happened exactly once and the tool's own output reached the upstream. */
  function expectOneRoundTrip(loop: ToolLoop, shown: string): void {
    expect(loop.calls, shown).toHaveLength(1);
    expect(loop.results, shown).toHaveLength(1);
    expect(loop.results[0], shown).toContain(weatherOf(CITY));
  }

  /** The client's own usage total is what the fake reported over the last `answers` answers. */
  function expectUsageSeen(usage: { inputTokens?: number | undefined; outputTokens?: number | undefined }, answers: number, shown: string): void {
    const last = fixture.reportedUsage.slice(-answers);
    expect({ inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }, shown).toEqual({
      inputTokens: last.reduce((sum, one) => sum + one.prompt_tokens, 0),
      outputTokens: last.reduce((sum, one) => sum + one.completion_tokens, 0),
    });
  }

  const requestsOf = (which: 'openai' | 'anthropic') =>
    JSON.stringify(fixture[which].requests.map((request) => ({ path: request.path, body: request.body })), null, 1);

  /** An OpenAI Agents SDK agent with a get_weather function tool, and the fake's tool loop it will meet. */
  function forecasterAgent() {
    const loop = openAIToolLoop(fixture, { call: callTool('get_weather', { city: CITY }), finalText: FINAL_TEXT });
    const weather = agentTool({
      name: 'get_weather',
      description: 'The weather in a city.',
      parameters: z.object({ city: z.string() }),
      execute: async ({ city }) => weatherOf(city),
    });
    const agent = new Agent({ name: 'forecaster', instructions: 'Answer with the forecast.', model: OPENAI_MODEL, tools: [weather] });
    return { loop, agent };
  }

  for (const stream of [false, true]) {
    const mode = stream ? 'streamed' : 'not streamed';

    it(`OpenAI Agents SDK: a function tool over the Responses API, ${mode}`, async () => {
      const { loop, agent } = forecasterAgent();
      const runner = new Runner({
        modelProvider: new OpenAIProvider({ apiKey: fixture.apiKey, baseURL: `${fixture.url}/v1`, useResponses: true }),
        tracingDisabled: true,
      });
      const input = `What is the weather in ${CITY}?`;
      let finalOutput: unknown;
      if (stream) {
        const result = await runner.run(agent, input, { maxTurns: 4, stream: true });
        for await (const _event of result) { /* drained */ }
        await result.completed;
        finalOutput = result.finalOutput;
      } else {
        finalOutput = (await runner.run(agent, input, { maxTurns: 4 })).finalOutput;
      }
      const shown = requestsOf('openai');
      expect(finalOutput, shown).toBe(FINAL_TEXT);
      expectGatewayCalls('/v1/responses', stream, shown);
      expectOneRoundTrip(loop, shown);
      await fixture.expectChargedExactly();
    });

    it(`OpenAI Agents SDK: a second run chained by previousResponseId (stored responses), ${mode}`, async () => {
      const { loop, agent } = forecasterAgent();
      // What the SDK sent as previous_response_id on each /v1/responses call (the client below takes this fetch).
      const chained: (string | null)[] = [];
      const suiteFetch = globalThis.fetch;
      globalThis.fetch = (input, init) => {
        if (String(input instanceof Request ? input.url : input).endsWith('/v1/responses') && typeof init?.body === 'string') {
          chained.push((JSON.parse(init.body) as { previous_response_id?: string }).previous_response_id ?? null);
        }
        return suiteFetch(input, init);
      };
      const runner = new Runner({
        modelProvider: new OpenAIProvider({ apiKey: fixture.apiKey, baseURL: `${fixture.url}/v1`, useResponses: true }),
        tracingDisabled: true,
      });
      const run = async (input: string, previousResponseId: string | undefined) => {
        const options = { maxTurns: 4, ...(previousResponseId ? { previousResponseId } : {}) };
        if (!stream) return runner.run(agent, input, options);
        const result = await runner.run(agent, input, { ...options, stream: true });
        for await (const _event of result) { /* drained */ }
        await result.completed;
        return result;
      };
      let first: Awaited<ReturnType<typeof run>>;
      let second: Awaited<ReturnType<typeof run>>;
      try {
        first = await run(`What is the weather in ${CITY}?`, undefined);
        second = await run('Thanks. Say it again.', first.lastResponseId);
      } finally {
        globalThis.fetch = suiteFetch;
      }
      expect(first.finalOutput).toBe(FINAL_TEXT);
      expect(first.lastResponseId).toMatch(/^resp_/);
      const shown = requestsOf('openai');
      // The second run's calls continued stored responses: the first named the first run's last response.
      expect(chained.filter((id) => id !== null).length, shown).toBeGreaterThanOrEqual(1);
      expect(chained, shown).toContain(first.lastResponseId);
      expect(second.finalOutput, shown).toBe(FINAL_TEXT);
      // The second run sent only its new input with previous_response_id; the provider got the whole conversation.
      const sent = fixture.openai.requests.at(-1)!.body.messages as { role: string; content: unknown }[];
      const texts = sent.map((message) => (typeof message.content === 'string' ? message.content : JSON.stringify(message.content)));
      expect(texts.some((text) => text.includes(`What is the weather in ${CITY}?`)), shown).toBe(true);
      expect(sent.some((message) => message.role === 'tool'), shown).toBe(true);
      expect(texts.at(-1), shown).toContain('Thanks. Say it again.');
      expect(loop.calls.length, shown).toBeGreaterThanOrEqual(1);
      await fixture.expectChargedExactly();
    });

    /** LangChain's own loop: invoke with bound tools, run each tool call, feed ToolMessages back, until text. */
    async function langchainLoop(model: { bindTools: ChatOpenAI['bindTools'] } | ChatAnthropic): Promise<AIMessage> {
      const weather = langchainTool(async ({ city }: { city: string }) => weatherOf(city), {
        name: 'get_weather',
        description: 'The weather in a city.',
        schema: z.object({ city: z.string() }),
      });
      const bound = (model as ChatOpenAI).bindTools([weather]);
      const messages: BaseMessage[] = [new HumanMessage(`What is the weather in ${CITY}?`)];
      for (let turn = 0; turn < 4; turn++) {
        const reply = (await bound.invoke(messages)) as AIMessage;
        messages.push(reply);
        if (!reply.tool_calls?.length) return reply;
        for (const call of reply.tool_calls) {
          const output = await weather.invoke(call.args as { city: string });
          messages.push(new ToolMessage({ tool_call_id: call.id!, content: String(output) }));
        }
      }
      throw new Error('the tool loop did not finish in 4 turns');
    }

    it(`LangChain ChatOpenAI with useResponsesApi: a tool loop, ${mode}`, async () => {
      const loop = openAIToolLoop(fixture, { call: callTool('get_weather', { city: CITY }), finalText: FINAL_TEXT });
      const model = new ChatOpenAI({
        model: OPENAI_MODEL,
        apiKey: fixture.apiKey,
        configuration: { baseURL: `${fixture.url}/v1` },
        useResponsesApi: true,
        streaming: stream,
        maxRetries: 0,
      });
      const reply = await langchainLoop(model);
      const shown = requestsOf('openai');
      expect(reply.text, shown).toBe(FINAL_TEXT);
      expectGatewayCalls('/v1/responses', stream, shown);
      expectOneRoundTrip(loop, shown);
      await fixture.expectChargedExactly();
    });

    it(`LangChain ChatAnthropic: a tool loop, ${mode}`, async () => {
      const loop = anthropicToolLoop(fixture, { call: callTool('get_weather', { city: CITY }), finalText: FINAL_TEXT });
      const model = new ChatAnthropic({
        model: ANTHROPIC_MODEL,
        apiKey: fixture.apiKey,
        anthropicApiUrl: fixture.url,
        maxRetries: 0,
        maxTokens: 1024,
        streaming: stream,
      });
      const reply = await langchainLoop(model);
      const shown = requestsOf('anthropic');
      expect(reply.text, shown).toBe(FINAL_TEXT);
      expectGatewayCalls('/v1/messages', stream, shown);
      expectOneRoundTrip(loop, shown);
      await fixture.expectChargedExactly();
    });

    /** The AI SDK's own loop: generateText (or streamText, drained) with a tool and a step bound. */
    async function aiSdkLoop(model: LanguageModel, stream: boolean) {
      const options = {
        model,
        prompt: `What is the weather in ${CITY}?`,
        tools: {
          get_weather: aiTool({
            description: 'The weather in a city.',
            inputSchema: z.object({ city: z.string() }),
            execute: async ({ city }) => weatherOf(city),
          }),
        },
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      };
      if (!stream) {
        const result = await generateText(options);
        return { text: result.text, steps: result.steps, totalUsage: result.totalUsage };
      }
      let failure: unknown;
      const result = streamText({ ...options, onError: ({ error }) => { failure = error; } });
      const text = await result.text;
      if (failure) throw failure;
      return { text, steps: await result.steps, totalUsage: await result.totalUsage };
    }

    /** The AI SDK's loop on `model`, and what it must show: two steps to the final text, one round trip, usage, one charge each. */
    async function expectAiSdkLoop(model: LanguageModel, loop: ToolLoop, upstream: 'openai' | 'anthropic', path: string) {
      const result = await aiSdkLoop(model, stream);
      const shown = requestsOf(upstream);
      expect(result.text, shown).toBe(FINAL_TEXT);
      expect(result.steps, shown).toHaveLength(2);
      expectGatewayCalls(path, stream, shown);
      expectOneRoundTrip(loop, shown);
      expectUsageSeen(result.totalUsage, 2, shown);
      await fixture.expectChargedExactly();
    }

    it(`Vercel AI SDK @ai-sdk/openai .responses(): ${stream ? 'streamText' : 'generateText'} with a tool`, async () => {
      const loop = openAIToolLoop(fixture, { call: callTool('get_weather', { city: CITY }), finalText: FINAL_TEXT });
      const openai = createOpenAI({ apiKey: fixture.apiKey, baseURL: `${fixture.url}/v1` });
      await expectAiSdkLoop(openai.responses(OPENAI_MODEL), loop, 'openai', '/v1/responses');
    });

    it(`Vercel AI SDK @ai-sdk/anthropic: ${stream ? 'streamText' : 'generateText'} with a tool`, async () => {
      const loop = anthropicToolLoop(fixture, { call: callTool('get_weather', { city: CITY }), finalText: FINAL_TEXT });
      const anthropic = createAnthropic({ apiKey: fixture.apiKey, baseURL: `${fixture.url}/v1` });
      await expectAiSdkLoop(anthropic(ANTHROPIC_MODEL), loop, 'anthropic', '/v1/messages');
    });
  }
});
