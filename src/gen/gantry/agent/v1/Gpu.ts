// Original file: proto/agent/v1/agent.proto


export interface Gpu {
  'name'?: (string);
  'vram_gb'?: (number | string);
}

export interface Gpu__Output {
  'name': (string);
  'vram_gb': (number);
}
