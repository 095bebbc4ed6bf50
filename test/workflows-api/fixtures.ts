import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

export const txt2img = JSON.parse(readFileSync(new URL('../fixtures/comfy/txt2img.json', import.meta.url), 'utf8')) as Record<string, any>;

let n = 0;
/** A slug unique across the whole test database (slugs are global). */
export const uniqueSlug = (prefix = 'wf'): string => `${prefix}-${randomBytes(3).toString('hex')}-${++n}`;

/** A valid comfyui create body (txt2img: KSampler 3, CheckpointLoaderSimple 4, CLIPTextEncode 6/7, SaveImage 9). */
export function comfyBody(over: Record<string, unknown> = {}): Record<string, any> {
  return {
    workflow_slug: uniqueSlug(),
    display_name: 'SD 1.5 txt2img',
    description: 'text to image',
    workflow_json: structuredClone(txt2img),
    parameters: [
      { key: 'prompt', label: 'Prompt', node_id: '6', field: 'text', required: true },
      { key: 'steps', node_id: '3', field: 'steps', min: 1, max: 150, default: 20 },
      { key: 'sampler', node_id: '3', field: 'sampler_name', options: ['euler', 'dpmpp_2m'] },
    ],
    required_labels: ['gpu'],
    task_timeout: 600,
    max_retries: 2,
    preferred_gpu: 'RTX 4090',
    min_vram_gb: 8,
    required_models: ['checkpoints/v1-5-pruned-emaonly.safetensors'],
    ...over,
  };
}

export function nerfBody(over: Record<string, unknown> = {}): Record<string, any> {
  return {
    workflow_slug: uniqueSlug('ns'),
    display_name: 'Splat from URL',
    tool_type: 'nerfstudio',
    workflow_json: {
      method: 'splatfacto',
      data: { source: 'url', url: 'https://example.com/capture.zip' },
      process_data: { input_type: 'images' },
      train: { max_num_iterations: 30000 },
      export: { format: 'gaussian-splat' },
    },
    parameters: [{ key: 'iterations', target_path: 'train.max_num_iterations', min: 1, max: 100000 }],
    ...over,
  };
}

export const READ_FIELDS = [
  'id',
  'workflow_slug',
  'display_name',
  'description',
  'workflow_json',
  'parameters',
  'tool_type',
  'required_labels',
  'task_timeout',
  'max_retries',
  'preferred_gpu',
  'default_dispatch_target',
  'min_vram_gb',
  'required_models',
  'version',
  'workflow_status',
  'created_at',
  'updated_at',
];
