import { InMemoryInvalidation } from '../../src/identity/invalidation.js';
import { invalidationContract } from './invalidation-contract.js';

invalidationContract('in-memory invalidation', async () => {
  const port = new InMemoryInvalidation();
  return { a: port, b: port, close: async () => undefined };
});
