/*
 * What the storing route (stored-response-steps.ts) decided about one parsed request body, for the
 * converter and the renderers, which see only the body: whether its answer is stored (`store` echoed
 * true) and whether its `previous_response_id` was expanded into its input (else the converter refuses
 * it: a body that reached it unexpanded came from a path that stores nothing).
 */
const storedBodies = new WeakSet<object>();
const expandedBodies = new WeakSet<object>();

export function markStored(body: object): void {
  storedBodies.add(body);
}

export function isStored(body: object): boolean {
  return storedBodies.has(body);
}

export function markExpanded(body: object): void {
  expandedBodies.add(body);
}

export function isExpanded(body: object): boolean {
  return expandedBodies.has(body);
}

const backgroundBodies = new WeakSet<object>();

/** A `background: true` body the storing route hands to the jobs service (the converter refuses it on any other path). */
export function markBackground(body: object): void {
  backgroundBodies.add(body);
}

export function isBackground(body: object): boolean {
  return backgroundBodies.has(body);
}

const conversationOfBody = new WeakMap<object, string>();

/** A body made in a conversation (`conversation`), its items expanded into the input by the storing route. */
export function markConversation(body: object, conversationId: string): void {
  conversationOfBody.set(body, conversationId);
}

/** The conversation a body was made in, once the storing route expanded it (else the converter refuses `conversation`). */
export function conversationOf(body: object): string | undefined {
  return conversationOfBody.get(body);
}

/**
 * A stored request body parsed again to render its background run (render-background*.ts): stored, and
 * made in the conversation its `conversation` field names, as it was when it was handed on.
 */
export function markStoredBody(body: object): void {
  markStored(body);
  const conversation = (body as { conversation?: unknown }).conversation;
  const id = typeof conversation === 'string' ? conversation : typeof (conversation as { id?: unknown } | null)?.id === 'string' ? (conversation as { id: string }).id : undefined;
  if (id !== undefined && id !== '') markConversation(body, id);
}
