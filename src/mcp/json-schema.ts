/**
 * A workflow's parameters (the spec's ParameterDef list) as a JSON Schema (draft 2020-12) of the
 * run's `parameters` object, so a model can build a valid run: types, required, min/max, options
 * (enum), defaults, descriptions. The run itself is still validated by the run route
 * (src/domain/workflows/parameters.ts); this is a description of the same rules.
 */
import type { NormalizedParameterDef } from '../domain/workflows/schema.js';

export interface ParametersJsonSchema {
  $schema: string;
  type: 'object';
  properties: Record<string, Record<string, unknown>>;
  required: string[];
  additionalProperties: boolean;
}

export function parametersJsonSchema(params: readonly NormalizedParameterDef[]): ParametersJsonSchema {
  const properties: Record<string, Record<string, unknown>> = {};
  const required: string[] = [];
  for (const p of params) {
    const s: Record<string, unknown> = {};
    switch (p.type) {
      case 'string':
        s.type = 'string';
        if (p.options) s.enum = [...p.options];
        break;
      case 'integer':
      case 'number':
        s.type = p.type;
        if (p.min !== undefined) s.minimum = p.min;
        if (p.max !== undefined) s.maximum = p.max;
        break;
      case 'boolean':
        s.type = 'boolean';
        break;
      case 'file':
        s.type = 'string';
        s.format = 'gantry-file-key';
        break;
      case 'json':
        // any JSON value
        break;
    }
    if (p.label) s.title = p.label;
    const notes: string[] = [];
    if (p.description) notes.push(p.description);
    if (p.type === 'file') {
      notes.push('A file_key from create_upload (upload the file to the returned upload_url first).');
      if (p.accept) notes.push(`Accepted kinds: ${p.accept.join(', ')}.`);
    }
    if (p.source_key) notes.push(`When omitted, takes the value of parameter "${p.source_key}".`);
    if (notes.length) s.description = notes.join(' ');
    if (p.default !== undefined) s.default = p.default;
    properties[p.key] = s;
    // a parameter with a default or a source is never missing
    if (p.required === true && p.default === undefined && p.source_key === undefined) required.push(p.key);
  }
  return { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties, required, additionalProperties: false };
}
