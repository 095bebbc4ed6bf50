/** `gantry agent ...`: parses flags/env, runs the agent until SIGTERM/SIGINT (graceful drain) or a fatal refusal. */
import { createLogger } from '../shared/logger.js';
import { startTracing } from '../shared/tracing-sdk.js';
import { AGENT_VERSION, agentUsage, parseAgentArgs, startAgent, UsageError } from './main.js';

export async function runAgentCli(args: string[]): Promise<number> {
  let cfg;
  try {
    cfg = parseAgentArgs(args, process.env);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`gantry agent: ${e.message}\n\n${agentUsage()}`);
      return 2;
    }
    throw e;
  }
  if (cfg === null) {
    process.stdout.write(agentUsage());
    return 0;
  }
  const logger = createLogger(cfg.logLevel);
  const tracing = cfg.tracing === 'otlp' ? startTracing({ serviceName: 'gantry-agent', serviceVersion: AGENT_VERSION }) : null;
  const agent = await startAgent(cfg, { logger });
  let signals = 0;
  const onSignal = (sig: string): void => {
    signals++;
    if (signals > 1) {
      logger.warn({ signal: sig }, 'second signal: exiting now');
      process.exit(1);
    }
    logger.info({ signal: sig }, 'signal received: graceful drain');
    void agent.stop();
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
  const code = await agent.done;
  // the spans of the last tasks go out before the process exits
  await tracing?.shutdown().catch(() => undefined);
  return code;
}
