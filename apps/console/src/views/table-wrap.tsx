import type { ComponentChildren } from 'preact';

/**
 * A table that scrolls sideways on a narrow screen inside its own box (the page never does). The box is
 * a named region in the Tab order, so a keyboard can scroll it too.
 */
export function TableWrap({ label, children }: { label: string; children: ComponentChildren }) {
  return <div class="table-wrap" role="region" aria-label={label} tabIndex={0}>{children}</div>;
}
