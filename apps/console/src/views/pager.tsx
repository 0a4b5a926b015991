import { useEffect, useRef, useState } from 'preact/hooks';

/**
 * Previous/next buttons of a keyset-paged list. A button that becomes disabled (the first or the last
 * page) drops the keyboard focus; the other one takes it, so Tab order carries on where it was.
 */
export function Pager({ label, pageNumber, hasPrevious, hasNext, onPrevious, onNext, previousText, nextText }: {
  label: string;
  pageNumber: number;
  hasPrevious: boolean;
  hasNext: boolean;
  onPrevious: () => void;
  onNext: () => void;
  previousText: string;
  nextText: string;
}) {
  const previous = useRef<HTMLButtonElement>(null);
  const next = useRef<HTMLButtonElement>(null);
  const pressed = useRef<'previous' | 'next'>();

  useEffect(() => {
    const lost = document.activeElement === null || document.activeElement === document.body;
    const stranded = pressed.current === 'previous' ? previous.current : pressed.current === 'next' ? next.current : null;
    if (!stranded?.disabled) return;
    if (!lost && document.activeElement !== stranded) {
      pressed.current = undefined; // the user has moved on
      return;
    }
    // The other button may still be disabled until the new page arrives: then the next render tries again.
    const other = stranded === previous.current ? next.current : previous.current;
    if (other && !other.disabled) {
      other.focus();
      pressed.current = undefined;
    }
  });

  return (
    <nav class="pager" aria-label={label}>
      <button type="button" class="secondary" ref={previous} disabled={!hasPrevious}
        onClick={() => { pressed.current = 'previous'; onPrevious(); }}>{previousText}</button>
      <span aria-live="polite">Page {pageNumber}</span>
      <button type="button" class="secondary" ref={next} disabled={!hasNext}
        onClick={() => { pressed.current = 'next'; onNext(); }}>{nextText}</button>
    </nav>
  );
}

/**
 * Keyset paging state: the cursor of every page from the first to the one shown (undefined: the first
 * page). `pager(nextCursor)` gives the Pager its page number and buttons; `restart()` goes back to page 1.
 */
export function useKeysetPages() {
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const pageNumber = cursors.length;
  return {
    cursor: cursors[cursors.length - 1],
    pageNumber,
    restart: () => setCursors([undefined]),
    pager: (nextCursor: string | null | undefined) => ({
      pageNumber,
      hasPrevious: pageNumber > 1,
      hasNext: !!nextCursor,
      onPrevious: () => setCursors((stack) => stack.slice(0, -1)),
      onNext: () => { if (nextCursor) setCursors((stack) => [...stack, nextCursor]); },
    }),
  };
}
