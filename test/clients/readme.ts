/** README's shell blocks as steps for the README tests: each command with the "# " sample lines under it. */
import assert from 'node:assert/strict';

export interface Step {
  command: string;
  expected: string[];
}

/** The commands of README's first-steps block and the "# " sample lines under each. */
export function firstSteps(readme: string): Step[] {
  const m = /<!-- first-steps:begin[^>]*-->\s*```sh\n([\s\S]*?)```\s*<!-- first-steps:end -->/.exec(readme);
  assert.ok(m, 'README has a shell block between <!-- first-steps:begin --> and <!-- first-steps:end -->');
  const steps: Step[] = [];
  const lines = (m[1] as string).split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      assert.ok(steps.length > 0, `a sample line before any command: ${line}`);
      steps[steps.length - 1]!.expected.push(line.replace(/^# ?/, ''));
      continue;
    }
    let command = line;
    while (command.endsWith('\\') && i + 1 < lines.length) command = `${command}\n${lines[++i]}`;
    steps.push({ command, expected: [] });
  }
  return steps;
}

