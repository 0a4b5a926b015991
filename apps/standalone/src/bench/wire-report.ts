/**
 * `--wire`: the gateway's CPU per request with the bench model served over each provider wire, against
 * the OpenAI wire of the same run and dialect (issue 26: Gemini and Bedrock within 10 % of OpenAI).
 */

/** One measured part of one wire: the gateway's CPU per answered request, in all and by process. */
export interface WireSample {
  cpuMicros: number;
  byProcess: Record<string, number>;
  errors: number;
}

export interface WireRow {
  dialect: string;
  wire: string;
  /** Whole answers (the max phase), one sample per round. */
  whole: WireSample[];
  /** Streams (the streams phase, else ttfb), one sample per round. */
  streamed: WireSample[];
}

/** The middle value (the mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length === 0 ? Number.NaN : sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** At most this multiple of the OpenAI wire's CPU per request (issue 26). */
export const WIRE_CPU_LIMIT = 1.1;

/** The median of the samples' CPU, in all and for each process (NaN when no sample). */
export function medianSample(samples: readonly WireSample[]): { cpuMicros: number; byProcess: Record<string, number>; errors: number } {
  const groups = new Set(samples.flatMap((sample) => Object.keys(sample.byProcess)));
  return {
    cpuMicros: samples.length ? median(samples.map((sample) => sample.cpuMicros)) : Number.NaN,
    byProcess: Object.fromEntries([...groups].map((group) => [group, median(samples.map((sample) => sample.byProcess[group] ?? 0))])),
    errors: samples.reduce((total, sample) => total + sample.errors, 0),
  };
}

const micros = (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : 'n/a');
const ratio = (value: number, reference: number) => (Number.isFinite(value) && Number.isFinite(reference) && reference > 0 ? value / reference : Number.NaN);
const times = (value: number) => (Number.isFinite(value) ? `${value.toFixed(3)}×` : 'n/a');
/** CPU of the request path (edge + routing), where the adapter runs; the settlement after it is the same work for every wire. */
const requestPath = (byProcess: Record<string, number>) => (byProcess.edge ?? Number.NaN) + (byProcess.routing ?? Number.NaN);
const path = (byProcess: Record<string, number>, reference: Record<string, number> | undefined) =>
  byProcess.edge === undefined && byProcess.routing === undefined
    ? 'n/a'
    : `${micros(byProcess.edge ?? Number.NaN)} / ${micros(byProcess.routing ?? Number.NaN)} (${times(ratio(requestPath(byProcess), reference ? requestPath(reference) : Number.NaN))})`;

/** The wire table, each wire against the OpenAI wire of its dialect; `rounds` samples per cell (median). */
export function formatWireTable(rows: readonly WireRow[], streamedPhase: string, rounds: number): string {
  const lines = [
    `CPU per request by provider wire (gateway: every process, Postgres and NATS; median of ${rounds} round${rounds === 1 ? '' : 's'}, wires alternating; beside it edge / routing µs and (edge + routing) against the OpenAI wire's, the request path the adapter runs on):`,
    '',
    `| dialect | wire | whole answer, CPU µs/request | vs openai | edge / routing | stream (${streamedPhase}), CPU µs/stream | vs openai | edge / routing | ≤ ${WIRE_CPU_LIMIT.toFixed(2)}× | errors |`,
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const row of rows) {
    const reference = rows.find((other) => other.dialect === row.dialect && other.wire === 'openai');
    const whole = medianSample(row.whole);
    const streamed = medianSample(row.streamed);
    const referenceWhole = reference ? medianSample(reference.whole) : undefined;
    const referenceStreamed = reference ? medianSample(reference.streamed) : undefined;
    const wholeRatio = ratio(whole.cpuMicros, referenceWhole?.cpuMicros ?? Number.NaN);
    const streamedRatio = ratio(streamed.cpuMicros, referenceStreamed?.cpuMicros ?? Number.NaN);
    const measured = [wholeRatio, streamedRatio].filter(Number.isFinite);
    const errors = whole.errors + streamed.errors;
    const verdict = row.wire === 'openai' ? '(reference)' : measured.length === 0 ? 'not run' : measured.every((value) => value <= WIRE_CPU_LIMIT) && errors === 0 ? 'yes' : '**no**';
    lines.push(
      `| ${row.dialect} | ${row.wire} | ${micros(whole.cpuMicros)} | ${times(wholeRatio)} | ${path(whole.byProcess, referenceWhole?.byProcess)} | ${micros(streamed.cpuMicros)} | ${times(streamedRatio)} | ${path(streamed.byProcess, referenceStreamed?.byProcess)} | ${verdict} | ${errors} |`,
    );
  }
  return lines.join('\n');
}
