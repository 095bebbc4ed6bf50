import { SystemMeta } from './system.js';
import { identityEntities } from './identity.js';

/** Every entity of the schema; each module appends its own here. */
export const allEntities = [SystemMeta, ...identityEntities];
