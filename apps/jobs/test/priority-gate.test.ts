import { describe, expect, it } from 'vitest';
import { testLogger } from '@gateway/testing';
import { DEFAULT_PRIORITY_GATE_OPTIONS, PriorityGate, type LoadSample } from '../src/priority-gate.js';

function gateWith(samples: (LoadSample | Error)[], clock: { now: number }) {
  let index = 0;
  const gate = new PriorityGate(
    async () => {
      const next = samples[Math.min(index++, samples.length - 1)]!;
      if (next instanceof Error) throw next;
      return next;
    },
    DEFAULT_PRIORITY_GATE_OPTIONS,
    testLogger('priority-gate'),
    () => clock.now,
  );
  return gate;
}

const busy = (started: number): LoadSample => ({ interactiveInFlight: 2, interactiveStarted: BigInt(started), eventLoopUtilization: 0.95 });
const quiet = (started: number): LoadSample => ({ interactiveInFlight: 0, interactiveStarted: BigInt(started), eventLoopUtilization: 0.9 });

describe('priority gate (lower-priority work gives way to interactive traffic)', () => {
  it('runs at the whole concurrency until routing is busy with interactive requests, then starts nothing new', async () => {
    const clock = { now: 10_000 };
    const gate = gateWith([quiet(10), busy(20), busy(30)], clock);
    expect(gate.allowance(8, 0)).toBe(8);
    await gate.poll();
    expect(gate.allowance(8, 0)).toBe(8);
    await gate.poll();
    expect(gate.currentShare).toBe(0);
    // Runs going on keep going; none is added while one runs.
    expect(gate.allowance(8, 5)).toBe(0);
    await gate.poll();
    expect(gate.currentShare).toBe(0);
  });

  it('at a share of nothing lets one run start per trickle interval, and only when none is running', async () => {
    const clock = { now: 10_000 };
    const gate = gateWith([busy(1)], clock);
    await gate.poll();
    expect(gate.allowance(8, 0)).toBe(1);
    gate.started(8);
    expect(gate.allowance(8, 1)).toBe(0);
    expect(gate.allowance(8, 0)).toBe(0);
    clock.now += DEFAULT_PRIORITY_GATE_OPTIONS.trickleMs - 1;
    expect(gate.allowance(8, 0)).toBe(0);
    clock.now += 1;
    expect(gate.allowance(8, 0)).toBe(1);
  });

  it('grows back once interactive requests stop arriving, even while routing stays busy with other work', async () => {
    const clock = { now: 0 };
    // Busy, then the same interactive count (none arrived) and none in flight: the batch's own load.
    const gate = gateWith([busy(1), busy(2), quiet(2), quiet(2), quiet(2), quiet(2), quiet(2)], clock);
    await gate.poll();
    await gate.poll();
    expect(gate.currentShare).toBe(0);
    const shares: number[] = [];
    for (let poll = 0; poll < 5; poll++) {
      await gate.poll();
      shares.push(gate.currentShare);
    }
    expect(shares).toEqual([0.25, 0.5, 0.75, 1, 1]);
    expect(gate.allowance(8, 0)).toBe(8);
  });

  it('does not yield to interactive traffic routing serves with room to spare', async () => {
    const gate = gateWith([{ interactiveInFlight: 3, interactiveStarted: 5n, eventLoopUtilization: 0.2 }, { interactiveInFlight: 3, interactiveStarted: 9n, eventLoopUtilization: 0.3 }], { now: 0 });
    await gate.poll();
    await gate.poll();
    expect(gate.currentShare).toBe(1);
  });

  it('runs at the whole concurrency when routing does not answer', async () => {
    const gate = gateWith([busy(1), new Error('unreachable')], { now: 0 });
    await gate.poll();
    expect(gate.currentShare).toBe(0);
    await gate.poll();
    expect(gate.currentShare).toBe(1);
  });
});
