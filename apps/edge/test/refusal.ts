import { expect } from 'vitest';
import { EdgeError, type ApiError } from '../src/errors.js';

/** The error `run` throws, as the client would get it (the test fails when it throws nothing or another error). */
export function refusalOf(run: () => unknown): ApiError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(EdgeError);
    return (error as EdgeError).apiError;
  }
  throw new Error('expected a refusal');
}
