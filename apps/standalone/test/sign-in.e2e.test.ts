import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserJson, signIn, signedIn, startSignInStack, type SignInStack } from './sign-in-harness.js';

describe('sign-in with an OpenID provider', () => {
  let stack: SignInStack;
  beforeAll(async () => {
    stack = await startSignInStack();
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it('signs a person in', async () => {
    const attempt = await signIn(stack, 'alice');
    console.log(attempt.callback.status, attempt.callback.text, attempt.callback.headers.getSetCookie());
    const { browser, session } = await signedIn(stack, 'alice');
    console.log(session);
    const balance = await browserJson(stack, browser, 'GET', '/v1/account/balance');
    expect(balance.status, balance.text).toBe(200);
  });
});
