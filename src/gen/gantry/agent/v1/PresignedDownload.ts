// Original file: proto/agent/v1/agent.proto


export interface PresignedDownload {
  'key'?: (string);
  'file_key'?: (string);
  'file_name'?: (string);
  'download_url'?: (string);
}

export interface PresignedDownload__Output {
  'key': (string);
  'file_key': (string);
  'file_name': (string);
  'download_url': (string);
}
