import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MODES, type Mode } from './contract-requests.js';
import { SCENARIOS, type ContractRig, type ContractSetup, type Scenario } from './contract-types.js';
import {
  conversationHistory, generationParameters, logprobsCarriedOrNamed, imageInput, imageUrlInput, jsonSchemaOutput, pdfInput, plainText, promptCacheMarks, reasoningProvenance, reasoningWithToolCalls, staticHeaders,
  redactedReasoning, systemPrompt, toolCallAnswer, toolDefinitionsAndChoice, toolErrorResult,
  toolRoundTrip,
} from './scenarios-conversation.js';
import {
  badCredentials, cancellation, connectionReset, error400, error429, error5xx, finishReasons, safetyBlock, stopSequenceReported, streamCut, streamErrorEvent,
  timeout, usage, usageOfReasoningOnly,
} from './scenarios-outcomes.js';
import { embeddings } from './scenarios-embeddings.js';
import { CONTRACT_SETUPS } from './setups/index.js';

/*
 * One contract for every adapter (issue 26): each row of the table (setups/index.ts) is an adapter built
 * through createAdapter from its catalog config against its own fake upstream, and every scenario runs on
 * it non-streamed (chat) and streamed (chatStream). A scenario the provider's API cannot express is
 * skipped by the row's declaration, with its reason in the test's name; nothing is skipped silently.
 */

type Body = (rig: ContractRig, setup: ContractSetup, mode: Mode) => Promise<void>;

/** How a scenario is called: a chat answer, a stream, or (embeddings) neither. */
type Variant = Mode | 'embed';

const BODIES: Record<Scenario, { modes: readonly Variant[]; body: Body }> = {
  'text': { modes: MODES, body: (rig, _setup, mode) => plainText(rig, mode) },
  'static headers': { modes: MODES, body: (rig, _setup, mode) => staticHeaders(rig, mode) },
  'system prompt': { modes: MODES, body: (rig, _setup, mode) => systemPrompt(rig, mode) },
  'conversation history': { modes: MODES, body: (rig, _setup, mode) => conversationHistory(rig, mode) },
  'generation parameters': { modes: MODES, body: (rig, _setup, mode) => generationParameters(rig, mode) },
  'logprobs carried or named': { modes: MODES, body: (rig, _setup, mode) => logprobsCarriedOrNamed(rig, mode) },
  'tool definitions and choice': { modes: MODES, body: (rig, _setup, mode) => toolDefinitionsAndChoice(rig, mode) },
  'tool call answer': { modes: MODES, body: (rig, _setup, mode) => toolCallAnswer(rig, mode, false) },
  'parallel tool calls': { modes: MODES, body: (rig, _setup, mode) => toolCallAnswer(rig, mode, true) },
  'tool round trip': {
    modes: MODES,
    body: (rig, setup, mode) => toolRoundTrip(rig, mode, setup.unsupported['parallel tool calls'] === undefined),
  },
  'tool error result': { modes: MODES, body: (rig, _setup, mode) => toolErrorResult(rig, mode) },
  'image input': { modes: MODES, body: (rig, _setup, mode) => imageInput(rig, mode) },
  'image url input': { modes: MODES, body: (rig, _setup, mode) => imageUrlInput(rig, mode) },
  'pdf input': { modes: MODES, body: (rig, _setup, mode) => pdfInput(rig, mode) },
  'json schema output': { modes: MODES, body: (rig, setup, mode) => jsonSchemaOutput(rig, setup, mode) },
  'reasoning provenance': { modes: MODES, body: (rig, _setup, mode) => reasoningProvenance(rig, mode) },
  'redacted reasoning': { modes: MODES, body: (rig, _setup, mode) => redactedReasoning(rig, mode) },
  'reasoning with tool calls': { modes: MODES, body: (rig, _setup, mode) => reasoningWithToolCalls(rig, mode) },
  'finish reasons': { modes: MODES, body: (rig, _setup, mode) => finishReasons(rig, mode) },
  'stop sequence reported': { modes: MODES, body: (rig, _setup, mode) => stopSequenceReported(rig, mode) },
  'safety block': { modes: MODES, body: (rig, setup, mode) => safetyBlock(rig, setup, mode) },
  'usage': { modes: MODES, body: (rig, setup, mode) => usage(rig, setup, mode) },
  'usage of reasoning only': { modes: MODES, body: (rig, setup, mode) => usageOfReasoningOnly(rig, setup, mode) },
  'error 400': { modes: MODES, body: (rig, _setup, mode) => error400(rig, mode) },
  'bad credentials': { modes: MODES, body: (rig, _setup, mode) => badCredentials(rig, mode) },
  'error 429': { modes: MODES, body: (rig, _setup, mode) => error429(rig, mode) },
  'error 5xx': { modes: MODES, body: (rig, _setup, mode) => error5xx(rig, mode) },
  'connection reset': { modes: MODES, body: (rig, _setup, mode) => connectionReset(rig, mode) },
  'timeout': { modes: MODES, body: (rig, _setup, mode) => timeout(rig, mode) },
  // A cut and an in-band error are what can happen only once a stream has begun.
  'stream cut': { modes: ['stream'], body: (rig) => streamCut(rig) },
  'stream error event': { modes: ['stream'], body: (rig) => streamErrorEvent(rig) },
  'cancellation': { modes: MODES, body: (rig, _setup, mode) => cancellation(rig, mode) },
  'prompt cache marks': { modes: MODES, body: (rig, _setup, mode) => promptCacheMarks(rig, mode) },
  'embeddings': { modes: ['embed'], body: (rig) => embeddings(rig) },
};

describe('adapter contract', () => {
  it('the table declares each unsupported scenario by a known name, with a reason', () => {
    expect(CONTRACT_SETUPS.length).toBeGreaterThan(0);
    for (const setup of CONTRACT_SETUPS) {
      for (const [scenario, reason] of Object.entries(setup.unsupported)) {
        expect(SCENARIOS, `${setup.kind}: ${scenario}`).toContain(scenario);
        expect(reason?.trim(), `${setup.kind}: ${scenario} needs a reason`).not.toBe('');
      }
      // A row that declares everything away would pass vacuously.
      expect(Object.keys(setup.unsupported).length, setup.kind).toBeLessThan(SCENARIOS.length - 4);
    }
    expect(new Set(CONTRACT_SETUPS.map((setup) => setup.label ?? setup.kind)).size).toBe(CONTRACT_SETUPS.length);
  });

  for (const setup of CONTRACT_SETUPS) {
    describe(setup.label ?? setup.kind, () => {
      let rig: ContractRig;
      beforeAll(async () => {
        rig = await setup.start();
      });
      afterAll(async () => {
        await rig?.close();
      });
      beforeEach(() => rig.reset());

      it('is built by createAdapter from its catalog config', () => {
        expect(rig.adapter.kind).toBe(setup.kind);
        expect(rig.adapter.providerId).toBe(rig.providerId);
        expect(rig.adapter.specificationVersion).toBe('v1');
      });

      for (const scenario of SCENARIOS) {
        const { modes, body } = BODIES[scenario];
        const reason = setup.unsupported[scenario];
        for (const mode of modes) {
          const title = `${mode}: ${scenario}`;
          if (reason !== undefined) it.skip(`${title} (declared unsupported: ${reason})`, () => undefined);
          else it(title, () => body(rig, setup, mode === 'embed' ? 'chat' : mode));
        }
      }
    });
  }
});
