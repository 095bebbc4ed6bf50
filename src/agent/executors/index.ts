export * from './types.js';
export { SimulateExecutor, type SimulateOptions } from './simulate.js';
export { ComfyUIExecutor, type ComfyUIOptions, type ComfySystemStats, type ComfyFileRef } from './comfyui.js';
export { NerfstudioExecutor, parseNerfstudioSpec, TrainOutputParser, type NerfstudioOptions, type NerfstudioPlan, type ExportCommand } from './nerfstudio.js';

import { ComfyUIExecutor, type ComfyUIOptions } from './comfyui.js';
import { NerfstudioExecutor, type NerfstudioOptions } from './nerfstudio.js';
import { SimulateExecutor, type SimulateOptions } from './simulate.js';
import type { Executor } from './types.js';

export type ExecutorConfig =
  | ({ kind: 'simulate' } & SimulateOptions)
  | ({ kind: 'comfyui' } & ComfyUIOptions)
  | ({ kind: 'nerfstudio' } & NerfstudioOptions);

/** Builds the executor selected by `gantry agent --executor <kind>`. */
export function createExecutor(cfg: ExecutorConfig): Executor {
  switch (cfg.kind) {
    case 'simulate': {
      const { kind: _k, ...o } = cfg;
      return new SimulateExecutor(o);
    }
    case 'comfyui': {
      const { kind: _k, ...o } = cfg;
      return new ComfyUIExecutor(o);
    }
    case 'nerfstudio': {
      const { kind: _k, ...o } = cfg;
      return new NerfstudioExecutor(o);
    }
  }
}
