import { pino, type Logger, type DestinationStream } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout (pino). Child loggers carry request_id, actor, task_id... */
export function createLogger(level: string, dest?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: ['req.headers.authorization', '*.password', '*.credential_value', '*.api_key'], censor: '[redacted]' },
    },
    dest,
  );
}
