import { describe, expect, it } from 'vitest';
import { formatWireTable, median, medianSample, type WireRow, type WireSample } from './wire-report.js';

const sample = (cpuMicros: number, errors = 0): WireSample => ({ cpuMicros, byProcess: { edge: cpuMicros * 0.4, routing: cpuMicros * 0.3, ledger: cpuMicros * 0.3 }, errors });

describe('wire table (--wire)', () => {
  it('takes the median of the rounds, in all and per process', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([])).toBeNaN();
    const middle = medianSample([sample(500), sample(400), sample(900, 1)]);
    expect(middle.cpuMicros).toBe(500);
    expect(middle.byProcess.edge).toBe(200);
    expect(middle.errors).toBe(1);
  });

  it('judges each wire against the OpenAI wire of its dialect, whole and streamed: at most 1.10×', () => {
    const rows: WireRow[] = [
      { dialect: 'chat', wire: 'openai', whole: [sample(500)], streamed: [sample(800)] },
      { dialect: 'chat', wire: 'gemini', whole: [sample(540)], streamed: [sample(860)] },
      { dialect: 'chat', wire: 'bedrock', whole: [sample(560)], streamed: [sample(820)] },
      { dialect: 'messages', wire: 'openai', whole: [sample(1000)], streamed: [] },
      { dialect: 'messages', wire: 'bedrock', whole: [sample(1050, 2)], streamed: [] },
    ];
    const lines = formatWireTable(rows, 'streams', 1).split('\n');
    const line = (dialect: string, wire: string) => lines.find((text) => text.startsWith(`| ${dialect} | ${wire} |`))!;
    expect(line('chat', 'openai')).toContain('(reference)');
    expect(line('chat', 'gemini')).toMatch(/\| 540 \| 1\.080× \| 216 \/ 162 \(1\.080×\) \| 860 \| 1\.075× \| 344 \/ 258 \(1\.075×\) \| yes \| 0 \|$/);
    expect(line('chat', 'openai')).toContain('| 200 / 150 (1.000×) |');
    // 560 / 500 = 1.12: too much CPU on whole answers, whatever the streams.
    expect(line('chat', 'bedrock')).toContain('1.120×');
    expect(line('chat', 'bedrock')).toContain('**no**');
    // Compared with its own dialect's OpenAI row (1.05×), but it failed requests.
    expect(line('messages', 'bedrock')).toContain('1.050×');
    expect(line('messages', 'bedrock')).toMatch(/\| n\/a \| n\/a \| n\/a \| \*\*no\*\* \| 2 \|$/);
    expect(lines[0]).toContain('median of 1 round,');
  });
});
