import type { Model, Pricing } from '@gateway/proto';

/**
 * The model as a batch line sees it (RequestContext.batch, set only by the jobs service): its prices are
 * the catalog's batch_pricing over the regular ones. The answer, the usage event and so the ledger's
 * charge all take the prices from the model routing resolved, so this one substitution prices the whole
 * line. One copy per catalog model object (a catalog refresh brings new objects, and new copies).
 */
const batchModels = new WeakMap<Model, Model>();

export function batchPricedModel(model: Model): Model {
  if (model.batchPricing === undefined) return model;
  let priced = batchModels.get(model);
  if (priced === undefined) {
    const overrides = Object.fromEntries(Object.entries(model.batchPricing).filter(([, value]) => value !== undefined && value !== '')) as Partial<Pricing>;
    priced = { ...model, pricing: { ...model.pricing, ...overrides } };
    batchModels.set(model, priced);
  }
  return priced;
}
