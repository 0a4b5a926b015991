// The catalog file's format (`gateway.yaml`): its schema, validation with every problem's path, and exact
// price parsing. The catalog service loads it; the bench and tooling check the documents they write with
// the same rules, without depending on the catalog app.
export * from './catalog-config.js';
export { normalizePrice, PRICE_DECIMALS_MAX, PRICE_WHOLE_DIGITS_MAX } from './price.js';
