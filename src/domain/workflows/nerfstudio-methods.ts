/**
 * What Gantry knows of nerfstudio's built-in methods, read from nerfstudio/configs/method_configs.py
 * (TrainerConfig of each `method_configs[...]` entry) and configs/experiment_config.py. Both the
 * workflow validation (refuse at create what cannot run) and the agent's executor (flags, output
 * folder, export rules) use it. A method that is not listed (an installed plugin) is passed to
 * ns-train as it is and is checked only by ns-train.
 */

/** The ns-train dataparser subcommands (configs/dataparser_configs.py dataparsers). */
export type NsDataparser = 'nerfstudio-data' | 'blender-data' | 'dnerf-data' | 'instant-ngp-data' | 'sitcoms3d-data' | 'phototourism-data' | 'sdfstudio-data' | 'none';

export interface NsMethodInfo {
  /** TrainerConfig.method_name: the folder ns-train writes under (splatfacto-big -> splatfacto). */
  methodName: string;
  /** TrainerConfig.max_num_iterations (the TrainerConfig default 1000000 when the method sets none). */
  maxNumIterations: number;
  /** TrainerConfig.steps_per_save (default 1000). */
  stepsPerSave: number;
  /** ExperimentConfig.vis (default "wandb": mipnerf, vanilla-nerf, dnerf). */
  vis: 'viewer' | 'wandb';
  /** The datamanager: ns-export pointcloud/poisson/tsdf accept only Vanilla/Parallel (exporter.py ExportPointCloud.main). */
  datamanager: 'parallel' | 'vanilla' | 'full-image' | 'random-cameras';
  /** The default dataparser of the method. */
  dataparser: NsDataparser;
  /** Model family: splat (gaussian-splat export), nerf (pointcloud/mesh), sdf (marching-cubes). */
  family: 'splat' | 'nerf' | 'sdf';
  /** Why a nerfstudio dataset (transforms.json) cannot be trained by this method, when it cannot. */
  unsupported?: string;
}

const nerf = (o: Partial<NsMethodInfo> & { methodName: string }): NsMethodInfo => ({
  maxNumIterations: 30000,
  stepsPerSave: 2000,
  vis: 'viewer',
  datamanager: 'parallel',
  dataparser: 'nerfstudio-data',
  family: 'nerf',
  ...o,
});

/** method_configs.py, by CLI name. */
export const NS_METHODS: Readonly<Record<string, NsMethodInfo>> = {
  nerfacto: nerf({ methodName: 'nerfacto' }),
  'nerfacto-big': nerf({ methodName: 'nerfacto', maxNumIterations: 100000 }),
  'nerfacto-huge': nerf({ methodName: 'nerfacto', maxNumIterations: 100000 }),
  'depth-nerfacto': nerf({ methodName: 'depth-nerfacto' }),
  'instant-ngp': nerf({ methodName: 'instant-ngp', datamanager: 'vanilla' }),
  'instant-ngp-bounded': nerf({ methodName: 'instant-ngp-bounded', datamanager: 'vanilla', dataparser: 'instant-ngp-data' }),
  mipnerf: nerf({ methodName: 'mipnerf', maxNumIterations: 1000000, stepsPerSave: 1000, vis: 'wandb', datamanager: 'vanilla' }),
  'vanilla-nerf': nerf({ methodName: 'vanilla-nerf', maxNumIterations: 1000000, stepsPerSave: 1000, vis: 'wandb', datamanager: 'vanilla', dataparser: 'blender-data' }),
  tensorf: nerf({ methodName: 'tensorf', datamanager: 'vanilla', dataparser: 'blender-data' }),
  dnerf: nerf({ methodName: 'dnerf', maxNumIterations: 1000000, stepsPerSave: 1000, vis: 'wandb', datamanager: 'vanilla', dataparser: 'dnerf-data', unsupported: 'it trains on time-stamped D-NeRF data (dnerf-data), not a nerfstudio dataset' }),
  'semantic-nerfw': nerf({ methodName: 'semantic-nerfw', datamanager: 'vanilla', dataparser: 'sitcoms3d-data', unsupported: 'it trains on Sitcoms3D data with semantics, not a nerfstudio dataset' }),
  phototourism: nerf({ methodName: 'phototourism', datamanager: 'vanilla', dataparser: 'phototourism-data', unsupported: 'it trains on Phototourism data, not a nerfstudio dataset' }),
  generfacto: nerf({ methodName: 'generfacto', stepsPerSave: 200, datamanager: 'random-cameras', dataparser: 'none', unsupported: 'it generates from a text prompt and trains on no capture' }),
  neus: nerf({ methodName: 'neus', maxNumIterations: 100000, stepsPerSave: 20000, datamanager: 'vanilla', dataparser: 'sdfstudio-data', family: 'sdf', unsupported: 'it trains on SDFStudio data (sdfstudio-data), not a nerfstudio dataset' }),
  'neus-facto': nerf({ methodName: 'neus-facto', maxNumIterations: 20001, datamanager: 'vanilla', dataparser: 'sdfstudio-data', family: 'sdf', unsupported: 'it trains on SDFStudio data (sdfstudio-data), not a nerfstudio dataset' }),
  splatfacto: nerf({ methodName: 'splatfacto', datamanager: 'full-image', family: 'splat' }),
  'splatfacto-big': nerf({ methodName: 'splatfacto', datamanager: 'full-image', family: 'splat' }),
  'splatfacto-mcmc': nerf({ methodName: 'splatfacto', datamanager: 'full-image', family: 'splat' }),
};

export const nsMethod = (cli: string): NsMethodInfo | undefined => (Object.hasOwn(NS_METHODS, cli) ? NS_METHODS[cli] : undefined);

/**
 * Dataparser subcommand to append to ns-train so it reads ns-process-data output (transforms.json):
 * methods whose default parser is Blender's or InstantNGP's get `nerfstudio-data`; null when the
 * default already reads it (or the method is unknown).
 */
export function nsDataparserToAppend(cli: string): 'nerfstudio-data' | null {
  const m = nsMethod(cli);
  return m && (m.dataparser === 'blender-data' || m.dataparser === 'instant-ngp-data') ? 'nerfstudio-data' : null;
}

/** A splatfacto-family method (gaussian-splat export; unknown methods named splatfacto* count too). */
export const isSplatMethod = (cli: string): boolean => (nsMethod(cli)?.family ?? (cli.startsWith('splatfacto') ? 'splat' : 'nerf')) === 'splat';
