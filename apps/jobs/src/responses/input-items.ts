/*
 * The input items of a stored response as OpenAI lists them (`GET /v1/responses/{id}/input_items`):
 * each with an `id` and in the item shape the `openai` SDK reads. Items are stored as the client sent
 * them (a continuation's are the conversation it continued, then its own input): an item without an
 * id gets one here, derived from the response and the item's place, so the same item has the same id
 * on every page and an `after` cursor finds it again.
 */

export type InputItem = Record<string, unknown>;

/** Ids of the items a client sent without one: the kind's prefix, the response's hex, `in` and the item's place. */
const PREFIX_OF_TYPE: Readonly<Record<string, string>> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  custom_tool_call: 'ctc',
  custom_tool_call_output: 'ctco',
  reasoning: 'rs',
};

/** The hex of `resp_<hex>` (the id of everything one answer produced derives from it). */
function responseHex(responseId: string): string {
  return responseId.startsWith('resp_') ? responseId.slice(5) : responseId;
}

/**
 * One stored item as listed: a message's string content becomes one text part (input_text, or
 * output_text for an assistant's), a message without `type` (the SDK's EasyInputMessage) is typed,
 * and an item without an id gets its derived one.
 */
export function listedItem(item: unknown, index: number, responseId: string): InputItem {
  const source: InputItem = typeof item === 'object' && item !== null && !Array.isArray(item) ? (item as InputItem) : { type: 'message', role: 'user', content: String(item) };
  const listed: InputItem = { ...source };
  if (listed.type === undefined && typeof listed.role === 'string') listed.type = 'message';
  if (listed.type === 'message' && typeof listed.content === 'string') {
    listed.content = [{ type: listed.role === 'assistant' ? 'output_text' : 'input_text', text: listed.content, ...(listed.role === 'assistant' ? { annotations: [] } : {}) }];
  }
  if (listed.type === 'message' && listed.status === undefined) listed.status = 'completed';
  if (typeof listed.id !== 'string' || listed.id === '') {
    const prefix = PREFIX_OF_TYPE[typeof listed.type === 'string' ? listed.type : ''] ?? 'item';
    listed.id = `${prefix}_${responseHex(responseId)}_in${index}`;
  }
  // The id first, as OpenAI writes it (readers do not care; people reading the JSON do).
  const { id, ...rest } = listed;
  return { id, ...rest };
}

export interface ItemsPage {
  items: InputItem[];
  hasMore: boolean;
}

export class UnknownCursorError extends Error {}

/**
 * A page of `items` (stored order: oldest first): `ascending` false lists newest first (OpenAI's
 * default). `after` is an item id of this response; the page starts after it in the page's order.
 */
export function pageOfItems(items: readonly unknown[], responseId: string, options: { after: string; limit: number; ascending: boolean }): ItemsPage {
  const listed = items.map((item, index) => listedItem(item, index, responseId));
  if (!options.ascending) listed.reverse();
  let start = 0;
  if (options.after !== '') {
    const at = listed.findIndex((item) => item.id === options.after);
    if (at < 0) throw new UnknownCursorError(`after: '${options.after}' is not an input item of this response.`);
    start = at + 1;
  }
  const page = listed.slice(start, start + options.limit);
  return { items: page, hasMore: start + options.limit < listed.length };
}
