import { ChatRequest, type ChatResponse } from '@gateway/proto';
import { BACKGROUND_REQUEST_MAX_BYTES, formatCredits } from '@gateway/platform';
import type { CatalogModel } from '../../catalog-cache.js';
import type { EdgeContext } from '../../context.js';
import { edgeErrors } from '../../errors.js';
import type { AnswerSink } from '../../inference/answer-sink.js';
import { chatSteps, type ChatCall } from '../../inference/chat-steps.js';
import type { AnswerContext, InferenceDialect, StreamWriter } from '../../inference/dialect.js';
import type { InferenceJob, InferenceSteps } from '../../inference/pipeline-steps.js';
import { compactionTriggered } from './compaction.js';
import { responseId } from './render-responses.js';
import { responsesDialect } from './responses-dialect.js';
import type { ResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';
import { inputItems } from './responses-websocket-cache.js';
import { isBackground, markBackground, markConversation, markExpanded, markStored } from './stored-marks.js';
import { queuedResponse } from './render-background.js';
import { gatewayHeaders } from '../../inference/gateway-headers.js';
import { checkContextWindow, measurePrompt, MINIMUM_HOLD_PICO } from '../../inference/request-bounds.js';
import { resolveFileParts } from '../../canonical/file-parts.js';

/*
 * POST /v1/responses over HTTP with stored responses (issue 41 item 6): the responses dialect's steps,
 * with a `previous_response_id` expanded into the input before conversion (the stored conversation,
 * its reasoning items carrying the issuer tags the gateway put on them, so they go back only to the
 * provider that issued them, whatever the upstream kind), and the answer queued to be stored once it
 * left (stored-responses.ts), when `store` is not false. The rest is the one pipeline, unchanged.
 */

/** One storing request: what its answer needs to be stored (set in prepare, the answer added by render / the stream writer). */
interface StoreTicket {
  inputItemsJson: string;
  /** Made in a conversation: it, and the request's own input (what goes into it before the output). */
  conversation?: { id: string; inputJson: string };
  response: object | string | undefined;
  writer: ResponsesStreamWriter | undefined;
  /** Queues the answer for the store (once): as a stream ends, or after a whole answer left. */
  store?: (response: object | string) => void;
}

const tickets = new WeakMap<object, StoreTicket>();

/** The responses dialect whose answers are noted for the store (a JSON answer's object, a stream's writer). */
const storingDialect: InferenceDialect<ResponsesRequest> = {
  ...responsesDialect,
  render(answer: ChatResponse, answerContext: AnswerContext, body: ResponsesRequest): unknown {
    const rendered = responsesDialect.render(answer, answerContext, body) as object;
    const ticket = tickets.get(body);
    if (ticket !== undefined) ticket.response = rendered;
    return rendered;
  },
  streamWriter(answerContext: AnswerContext, body: ResponsesRequest): StreamWriter {
    const writer = responsesDialect.streamWriter(answerContext, body);
    const ticket = tickets.get(body);
    if (ticket !== undefined && writer instanceof ResponsesStreamWriter) {
      ticket.writer = writer;
      // Queued as the stream ends, not once routing confirmed its usage stored: a read of the response or of
      // its conversation that follows the stream's last event at once waits for it in the queue.
      writer.onTerminal = (response) => ticket.store?.(response);
    }
    return writer;
  },
};

const inner = chatSteps(storingDialect);

class StoredResponseSteps implements InferenceSteps<ResponsesRequest, ChatCall> {
  readonly endpoint = inner.endpoint;
  readonly freeFormFields = inner.freeFormFields;

  parse(json: unknown): ResponsesRequest {
    return inner.parse!(json);
  }

  modelName(body: ResponsesRequest): string {
    return inner.modelName(body);
  }

  routing(body: ResponsesRequest) {
    return inner.routing!(body);
  }

  prepare(body: ResponsesRequest, model: CatalogModel, context: EdgeContext, job: InferenceJob<ResponsesRequest>): ChatCall | Promise<ChatCall> {
    const stored = context.storedResponses;
    if (body.background === true) this.checkBackground(body, context);
    const conversation = (body as Record<string, unknown>).conversation;
    if (conversation != null) return this.inConversation(body, conversation, model, context, job);
    if (body.previous_response_id != null) {
      if (stored === undefined) {
        throw edgeErrors.invalidRequest(
          'body.previous_response_id: this gateway stores no responses (it runs without a jobs service), so it cannot continue one: send the whole conversation in `input`.',
          'body.previous_response_id',
          'unsupported_parameter',
        );
      }
      return this.continuation(body, body.previous_response_id, model, context, job);
    }
    this.noteStoring(body, context, job);
    return inner.prepare(body, model, context, job);
  }

  private async continuation(body: ResponsesRequest, previousId: string, model: CatalogModel, context: EdgeContext, job: InferenceJob<ResponsesRequest>): Promise<ChatCall> {
    const conversation = await context.storedResponses!.conversationOf(job.key.accountId, previousId, job.requestId);
    body.input = [...conversation, ...inputItems(body.input)] as ResponsesRequest['input'];
    markExpanded(body);
    this.noteStoring(body, context, job);
    return inner.prepare(body, model, context, job);
  }

  /**
   * `conversation` (OpenAI's Conversations API): the conversation's items lead the input, and the answer's
   * entry carries the request's own input so the store appends it and the output to the conversation
   * when it stores the response (once). A response of this conversation still waiting in this edge's queue
   * is stored first, so a turn right after the last sees it. 404 for a conversation the account does not have.
   */
  private async inConversation(body: ResponsesRequest, conversation: unknown, model: CatalogModel, context: EdgeContext, job: InferenceJob<ResponsesRequest>): Promise<ChatCall> {
    const refuse = (why: string, code = 'unsupported_parameter') => {
      throw edgeErrors.invalidRequest(`body.conversation: ${why}`, 'body.conversation', code);
    };
    const id = typeof conversation === 'string' ? conversation : typeof conversation === 'object' && typeof (conversation as { id?: unknown }).id === 'string' ? (conversation as { id: string }).id : '';
    if (id === '' || id.length > 200) refuse('a conversation id (`conv_…`) or `{"id": "conv_…"}`.', 'invalid_value');
    if (body.previous_response_id != null) refuse('`conversation` and `previous_response_id` cannot be used together: send one of them.', 'mutually_exclusive_parameters');
    const stored = context.storedResponses;
    if (stored === undefined) refuse('this gateway keeps no conversations (it runs without a jobs service): send the whole conversation in `input`.');
    if (body.store === false) refuse('a response made in a conversation is stored with it: leave `store` out (or true).');
    if (compactionTriggered(body)) refuse('an in-band compaction cannot be made in a conversation.');
    const accountId = job.key.accountId;
    await stored!.settledConversation(accountId, id);
    const items = await stored!.conversations.allItems(accountId, id, job.requestId);
    const own = inputItems(body.input);
    body.input = [...items, ...own] as ResponsesRequest['input'];
    markConversation(body, id);
    this.noteStoring(body, context, job);
    const ticket = tickets.get(body);
    if (ticket !== undefined) ticket.conversation = { id, inputJson: JSON.stringify(own) };
    return inner.prepare(body, model, context, job);
  }

  /** `store` (default true) on a gateway with a store: the input bounded and the ticket made, before any work. */
  private noteStoring(body: ResponsesRequest, context: EdgeContext, job: InferenceJob<ResponsesRequest>): void {
    const stored = context.storedResponses;
    // An in-band compaction answers a compaction item, not a turn: nothing a continuation could carry on.
    if (stored === undefined || body.store === false || compactionTriggered(body)) return;
    const inputItemsJson = JSON.stringify(inputItems(body.input));
    stored.checkRoom(job.key.accountId, inputItemsJson.length);
    markStored(body);
    tickets.set(body, { inputItemsJson, response: undefined, writer: undefined });
  }

  /**
   * `background: true` (OpenAI's background mode): it needs the store (400 with `store: false`, as
   * OpenAI), and what the jobs service's run cannot do yet is refused here, before any work: an
   * in-band compaction. Model fallbacks and provider preferences run as on the interactive path: the
   * request the jobs service hands routing carries them, and its hold covers the dearest model left.
   */
  private checkBackground(body: ResponsesRequest, context: EdgeContext): void {
    const refuse = (param: string, why: string) => {
      throw edgeErrors.invalidRequest(`body.${param}: ${why}`, `body.${param}`, 'unsupported_parameter');
    };
    if (context.storedResponses === undefined) refuse('background', 'this gateway runs no jobs service, so it runs no background responses.');
    if (body.store === false) refuse('store', 'background responses must be stored: send `store: true` (or leave it out) with `background: true`.');
    if (compactionTriggered(body)) refuse('background', 'an in-band compaction cannot run in the background.');
    markBackground(body);
  }

  /** A background request: handed to the jobs service (which admits and runs it) and answered `queued` at once. */
  detach(prepared: ChatCall, job: InferenceJob<ResponsesRequest>, sink: AnswerSink, context: EdgeContext): false | Promise<true> {
    if (!isBackground(job.body)) return false;
    return this.handOn(prepared, job, sink, context);
  }

  private async handOn(prepared: ChatCall, job: InferenceJob<ResponsesRequest>, sink: AnswerSink, context: EdgeContext): Promise<true> {
    const ticket = tickets.get(job.body);
    const stored = context.storedResponses;
    if (ticket === undefined || stored === undefined) throw edgeErrors.invalidRequest('body.background: this request cannot be stored.', 'body.background', 'unsupported_parameter');
    const { converted } = prepared;
    const model = job.model;
    await this.readFiles(prepared, job, context);
    // What each attempt holds (the jobs service admits it): the worst case over every model that may
    // serve, at least the paid minimum. A free first model with a paid fallback is a paid request: its
    // admission must refuse a key without credit, or the fallback would serve it for nothing.
    const paid = model.paid || (prepared.candidates?.some((candidate) => candidate.paid) ?? false);
    const holdPico = !paid ? 0n : prepared.holdPico < MINIMUM_HOLD_PICO ? MINIMUM_HOLD_PICO : prepared.holdPico;
    converted.request.routingStrategy = job.strategy;
    const created = Math.floor(context.now() / 1000);
    const queued = queuedResponse(job.requestId, model, created, job.body);
    await stored.createBackground(
      {
        accountId: job.key.accountId,
        keyId: job.key.keyId,
        responseId: responseId(job.requestId),
        inputItemsJson: ticket.inputItemsJson,
        response: queued,
        createdAt: created,
        ...(ticket.conversation ? { conversationId: ticket.conversation.id, conversationInputJson: ticket.conversation.inputJson } : {}),
      },
      { tier: job.key.tier, request: converted.request, holdCredits: holdPico > 0n ? formatCredits(holdPico) : '', requestJson: JSON.stringify(job.body), modelId: model.id },
      job.requestId,
    );
    const headers = gatewayHeaders(job.strategy, converted.droppedParams, [], converted.droppedTools);
    // Streamed: the run's events as the jobs service records them (a client that leaves stops nothing).
    if (job.body.stream === true) await stored.streamRun(sink, { accountId: job.key.accountId, responseId: responseId(job.requestId), startingAfter: -1, requestId: job.requestId, headers });
    else sink.json(queued, headers);
    return true;
  }

  /**
   * File blocks read here, after admission's checks and before the hand-on, as the interactive path
   * reads them before its Router call: URLs fetched through the media service, text extracted for a
   * model without file input. The stored request then carries the bytes or text, so the jobs service's
   * run needs no media service; its size is bounded (400 over BACKGROUND_REQUEST_MAX_BYTES).
   */
  private async readFiles(prepared: ChatCall, job: InferenceJob<ResponsesRequest>, context: EdgeContext): Promise<void> {
    const { converted } = prepared;
    const request = converted.request;
    await resolveFileParts(request.messages, job.model, {
      media: context.media,
      requestId: job.requestId,
      jobs: context.jobs,
      accountId: job.key.accountId,
      signal: job.signal,
      ...(converted.filePathOf ? { pathOf: converted.filePathOf } : {}),
    });
    // Fetched files only now have a size: the window is checked again (the hold already assumed a full window).
    if (prepared.measure.unresolvedFiles) await checkContextWindow(job.model, request, measurePrompt(request), converted.outputField);
    const bytes = ChatRequest.encode({ ...request, context: undefined }).finish().length;
    if (bytes > BACKGROUND_REQUEST_MAX_BYTES) {
      throw edgeErrors.invalidRequest(
        `body.input: a background response's request, its files read, may take at most ${BACKGROUND_REQUEST_MAX_BYTES} bytes (this one takes ${bytes}); send smaller files, or make the request without \`background\`.`,
        'body.input',
        'request_too_large',
      );
    }
  }

  refused(error: unknown, prepared: ChatCall): unknown {
    return inner.refused ? inner.refused(error, prepared) : error;
  }

  async exchange(prepared: ChatCall, job: InferenceJob<ResponsesRequest>, sink: AnswerSink, context: EdgeContext): Promise<void> {
    const ticket = tickets.get(job.body);
    const stored = context.storedResponses;
    if (ticket !== undefined && stored !== undefined) {
      let queued = false;
      ticket.store = (response) => {
        if (queued) return;
        queued = true;
        stored.enqueue({
          accountId: job.key.accountId,
          keyId: job.key.keyId,
          responseId: responseId(job.requestId),
          inputItemsJson: ticket.inputItemsJson,
          response,
          createdAt: prepared.created,
          ...(ticket.conversation ? { conversationId: ticket.conversation.id, conversationInputJson: ticket.conversation.inputJson } : {}),
        });
      };
    }
    await inner.exchange(prepared, job, sink, context);
    // The answer left (its bytes handed to the socket): stored behind it, off its path.
    if (ticket === undefined || ticket.store === undefined || job.failedAfterCommit) return;
    const response = ticket.response ?? ticket.writer?.terminalResponse;
    if (response !== undefined) ticket.store(response);
  }
}

/** The steps of POST /v1/responses (HTTP): the dialect's, with stored responses. */
export const storedResponseSteps = new StoredResponseSteps();
