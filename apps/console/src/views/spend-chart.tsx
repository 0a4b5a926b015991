import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import type { ActivityRow } from '../api.js';
import { toUnits } from '../decimal.js';

const COLOURS = ['#2563eb', '#d97706', '#059669', '#db2777', '#7c3aed', '#0891b2', '#65a30d', '#dc2626'];

/** UTC dates of the last `days` days, oldest first. */
function lastDays(days: number, now = new Date()): string[] {
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  return Array.from({ length: days }, (_, index) => new Date(today - (days - 1 - index) * 86_400_000).toISOString().slice(0, 10));
}

/**
 * Credits per day, one stacked bar segment per model. Heights are pixels, so the exact decimal credits
 * become doubles only here, for drawing; every number a reader sees comes from the table.
 */
export function SpendChart({ rows, days }: { rows: ActivityRow[]; days: number }) {
  const host = useRef<HTMLDivElement>(null);

  useEffect(() => {
    const element = host.current;
    if (!element) return;
    const dates = lastDays(days);
    const models = [...new Set(rows.map((row) => row.model))].sort();
    const perModel = models.map((model) => dates.map((date) => rows.filter((row) => row.model === model && row.date === date)
      .reduce((total, row) => total + toUnits(row.credits), 0n)));
    // Stacked: each series is the running total of the ones before it; drawn last-first so each shows.
    const stacked: number[][] = [];
    perModel.forEach((series, index) => {
      stacked.push(series.map((units, day) => Number(units) / 1e12 + (index > 0 ? stacked[index - 1]![day]! : 0)));
    });
    const x = dates.map((_, index) => index);
    const top = Math.max(0, ...(stacked.at(-1) ?? [0]));
    // Axis labels only (the table carries the exact credits): enough decimals to tell the ticks apart.
    const decimals = top >= 1 ? 2 : Math.min(12, Math.max(2, 1 - Math.floor(Math.log10(top || 1)) + 1));
    const bars = uPlot.paths.bars!({ size: [0.7, 48] });
    const width = Math.max(280, element.clientWidth);
    // Later models carry the taller running totals: hand them over first so each band stays visible.
    const order = models.map((_, index) => index).reverse();
    const plot = new uPlot({
      width,
      height: 260,
      scales: { x: { time: false, range: [-0.5, days - 0.5] }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [
        {
          splits: () => x.filter((index) => days <= 10 || index % Math.ceil(days / 8) === (days - 1) % Math.ceil(days / 8)),
          values: (_u, splits) => splits.map((index) => dates[index]?.slice(5) ?? ''),
        },
        { label: 'credits', size: 80, values: (_u, splits) => splits.map((value) => value.toFixed(decimals)) },
      ],
      series: [
        { label: 'Day', value: (_u: uPlot, index: number | null) => (index === null ? '' : dates[index] ?? '') },
        ...order.map((index) => ({
          label: models[index]!,
          stroke: COLOURS[index % COLOURS.length]!,
          fill: COLOURS[index % COLOURS.length]!,
          paths: bars,
          points: { show: false },
          value: (_u: uPlot, _v: number | null, _s: number, idx: number | null) =>
            idx === null || idx === undefined ? '' : (Number(perModel[index]![idx]!) / 1e12).toFixed(6),
        })),
      ],
    }, [x, ...order.map((index) => stacked[index]!)] as uPlot.AlignedData, element);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(280, element.clientWidth), height: 260 }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [rows, days]);

  return <div ref={host} class="chart" role="img" aria-label={`Spend per day over ${days} days, stacked by model`} />;
}
