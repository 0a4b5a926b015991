/**
 * The charge of one request. The computation lives in @gateway/platform (cost.ts) so the ledger, which
 * settles it, and the edge, which shows it in every answer (`usage.cost`), run the same code.
 */
export {
  computeCostBreakdownParsed,
  computeCostPico,
  computeCostPicoParsed,
  parsePricing,
  PricingCache,
  PricingError,
  ZERO_COST,
  type CostBreakdown,
  type ParsedPricing,
} from '@gateway/platform';
