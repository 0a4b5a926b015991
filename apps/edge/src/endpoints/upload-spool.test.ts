import { describe, expect, it } from 'vitest';
import { ByteBudget } from './upload-spool.js';

const timeout = () => new Error('waited too long');

describe('upload memory budget', () => {
  it('lets requests in while they fit, queues the next in arrival order, and lets a larger one in once alone', async () => {
    const budget = new ByteBudget(100);
    const first = await budget.acquire(60, 10_000, timeout);
    const order: string[] = [];
    const big = budget.acquire(500, 10_000, timeout).then((release) => { order.push('big'); return release; });
    // Fits beside the first, but arrived after `big`: it waits its turn (no overtaking).
    const small = budget.acquire(30, 10_000, timeout).then((release) => { order.push('small'); return release; });
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);
    expect(budget.heldBytes).toBe(60);
    first();
    const releaseBig = await big;
    expect(order).toEqual(['big']);
    expect(budget.heldBytes).toBe(100);
    releaseBig();
    releaseBig();
    const releaseSmall = await small;
    expect(order).toEqual(['big', 'small']);
    expect(budget.heldBytes).toBe(30);
    releaseSmall();
    expect(budget.heldBytes).toBe(0);
  });

  it('gives up after the wait bound having taken nothing, and a waiter that gives up lets the ones behind it in', async () => {
    const budget = new ByteBudget(100);
    const held = await budget.acquire(90, 10_000, timeout);
    await expect(budget.acquire(50, 20, timeout)).rejects.toThrow('waited too long');
    const controller = new AbortController();
    const blocked = budget.acquire(100, 10_000, timeout, controller.signal);
    const behind = budget.acquire(10, 10_000, timeout);
    controller.abort();
    await expect(blocked).rejects.toThrow(/aborted/);
    const releaseBehind = await behind;
    expect(budget.heldBytes).toBe(100);
    expect(budget.waiting).toBe(0);
    held();
    releaseBehind();
    expect(budget.heldBytes).toBe(0);
  });
});
