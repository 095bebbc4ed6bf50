/** Placeholder replaced by the agent program (issue 6). */
export async function runAgentCli(_args: string[]): Promise<number> {
  process.stderr.write('gantry agent: not available in this build\n');
  return 2;
}
