/** `{ reporters }` for a vitest config's `test` block, or nothing when GATEWAY_TEST_REPORT_DIR is unset. */
export function testReporters(): { reporters?: ['default', ['json', { outputFile: string }]] };
