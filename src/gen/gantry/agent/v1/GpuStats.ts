// Original file: proto/agent/v1/agent.proto


export interface GpuStats {
  'index'?: (number);
  'name'?: (string);
  'utilization_percent'?: (number | string);
  'vram_used_gb'?: (number | string);
  'vram_total_gb'?: (number | string);
  'temperature_c'?: (number | string);
}

export interface GpuStats__Output {
  'index': (number);
  'name': (string);
  'utilization_percent': (number);
  'vram_used_gb': (number);
  'vram_total_gb': (number);
  'temperature_c': (number);
}
