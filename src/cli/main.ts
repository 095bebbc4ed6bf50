/**
 * `gantry <command>` (commander). Server commands: serve, migrate, agent, vault rotate, backup, restore. Client
 * commands (built on @gantry/sdk): login, logout, whoami, teams, workflows, run, tasks, agents,
 * containers. Every command answers -h/--help with its usage and exit 0 doing nothing else;
 * -V/--version prints the package version.
 *
 * Exit codes: 0 done, 1 unexpected failure, 2 usage error, 3 the API refused the request,
 * 4 not logged in or not allowed (401/403), 5 the task ended failed or cancelled, 78 refused to
 * start (configuration, busy port, data dir in use, missing database). Errors are one line on stderr.
 */
import { Command, CommanderError, Option } from 'commander';
import { ConfigError } from '../shared/config.js';
import { commandUsage, configFrom, migrate, serve, vaultRotate, version } from './server.js';
import { backupUsage, restoreUsage } from './backup-usage.js';
import * as client from './client.js';
import * as lists from './lists.js';

const usage = `gantry <command> [options]

Server
  serve      start a node (HTTP on GANTRY_HTTP_PORT, gRPC on GANTRY_GRPC_PORT)
  migrate    apply database migrations and exit
  agent      run a GPU agent (gantry agent --help)
  vault rotate  re-encrypt every credential vault secret with the active key (GANTRY_VAULT_KEYS) and exit
  backup     backup --out DIR: pg_dump of DATABASE_URL plus the object store's manifest (and local objects)
  restore    restore --from DIR: a backup into an empty database (and its objects into the store)

Client (after gantry login; --server URL or GANTRY_SERVER, --json on read commands)
  login      pair this device with your account (prints a code to confirm)
  logout     revoke and forget the device credential
  whoami     the account and team of the stored credential
  teams      the teams you belong to
  workflows  list | get <slug> | push <file> | pull <slug[@v]> | export [--dir D]
  run        run <slug[@v]> -p key=value --file key=path --follow
  tasks      list | get <id> | cancel <id> | tail <id>
  agents     list
  containers list | get | create <file> | deploy | start | stop | undeploy | delete

  version    print the version (also -V, --version)
  help       print this help (also -h, --help; gantry <command> --help for one command)

Configuration comes from the environment (see README.md, Configuration); the CLI's credential is
kept in $GANTRY_CONFIG_DIR (default ~/.config/gantry/credentials.json, mode 0600).
Exit codes: 0 done, 1 unexpected, 2 usage, 3 API error, 4 not logged in / not allowed, 5 task failed
or cancelled, 78 refused to start.
`;

class Exit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

const out = (s: string): void => void process.stdout.write(s);
const err = (s: string): void => void process.stderr.write(s);

/** The command path of a commander command ('gantry workflows push'). */
function pathOf(cmd: Command): string {
  const names: string[] = [];
  for (let x: Command | null = cmd; x; x = x.parent) names.unshift(x.name());
  return names.join(' ');
}

function build(): Command {
  const program = new Command('gantry');
  program
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
    .helpCommand(false)
    .helpOption('-h, --help')
    .version(version().trimEnd(), '-V, --version')
    .enablePositionalOptions()
    .showSuggestionAfterError(false);
  // the top-level help is the hand-written overview; subcommands keep commander's own
  program.helpInformation = () => usage;

  const versionOpt = (c: Command): Command => c.addOption(new Option('-V, --version').hideHelp());
  const serverCmd = (name: 'serve' | 'migrate', fn: (createDb: boolean) => Promise<number>): void => {
    const c = program
      .command(name)
      .description(name === 'serve' ? 'start a node' : 'apply database migrations and exit')
      .option('--create-db', 'create the database named by DATABASE_URL if it does not exist')
      .configureHelp({ formatHelp: () => commandUsage[name] })
      .action(async (o: { createDb?: boolean; version?: boolean }) => {
        if (o.version) return out(version());
        throw new Exit(await fn(o.createDb === true));
      });
    versionOpt(c);
  };
  serverCmd('serve', async (createDb) => serve(configFrom(createDb)));
  serverCmd('migrate', async (createDb) => migrate(configFrom(createDb)));

  program
    .command('agent')
    .description('run a GPU agent')
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .passThroughOptions()
    .argument('[args...]')
    .action(async (args: string[]) => {
      if (args.some((a) => a === '-V' || a === '--version')) return out(version());
      const { runAgentCli } = await import('../agent/cli.js');
      throw new Exit(await runAgentCli(args));
    });

  const backupCmd = program
    .command('backup')
    .description('back up the database and the object store manifest')
    .requiredOption('--out <dir>', 'the backup directory (empty or absent)')
    .option('--objects', 'copy the objects (default for the local store)')
    .option('--no-objects', 'write the object manifest only (default for S3)')
    .configureHelp({ formatHelp: () => backupUsage })
    .action(async (o: { out: string; objects?: boolean; version?: boolean }) => {
      if (o.version) return out(version());
      const { backup } = await import('./backup.js');
      throw new Exit(await backup(configFrom(false), { out: o.out, ...(o.objects === undefined ? {} : { objects: o.objects }), version: version().trim() }));
    });
  versionOpt(backupCmd);
  const restoreCmd = program
    .command('restore')
    .description('restore a backup into an empty database')
    .requiredOption('--from <dir>', 'the backup directory')
    .option('--create-db', 'create the database named by DATABASE_URL if it does not exist')
    .configureHelp({ formatHelp: () => restoreUsage })
    .action(async (o: { from: string; createDb?: boolean; version?: boolean }) => {
      if (o.version) return out(version());
      const { restore } = await import('./backup.js');
      throw new Exit(await restore(configFrom(o.createDb === true), { from: o.from, createDb: o.createDb === true }));
    });
  versionOpt(restoreCmd);

  program
    .command('vault')
    .description('credential vault maintenance')
    .command('rotate')
    .description('re-encrypt every vault secret with the active key')
    .action(async () => {
      throw new Exit(await vaultRotate(configFrom(false)));
    });

  program
    .command('version')
    .description('print the version')
    .action(() => out(version()));

  program
    .command('help')
    .argument('[topic]')
    .description('print help')
    .action(async (topic?: string) => {
      if (topic === 'serve' || topic === 'migrate') return out(commandUsage[topic]);
      if (topic === 'agent') {
        const { agentUsage } = await import('../agent/main.js');
        return out(agentUsage());
      }
      const sub = topic ? program.commands.find((c) => c.name() === topic) : undefined;
      return out(sub ? sub.helpInformation() : usage);
    });

  clientCommands(program);
  return program;
}

/** The client commands (they talk to a server over its API). */
function clientCommands(program: Command): void {
  const g = (c: Command): Command => c.option('--server <url>', 'the Gantry server (default: the stored one, GANTRY_SERVER or http://127.0.0.1:8080)');
  const j = (c: Command): Command => g(c).option('--json', 'machine-readable JSON output');
  const opts = (c: Command): client.GlobalOpts & Record<string, unknown> => c.optsWithGlobals();
  // every list pages: one page (--page, --per-page) with a hint when more exist, or --all
  const paged = (c: Command): Command => c.option('--page <n>', 'the page to show (1 = the first)').option('--per-page <n>', 'rows per page (1-100, default 20)').option('--all', 'every page');

  j(program.command('login').description('pair this device with your account: prints a code to confirm while signed in'))
    .option('--name <device>', 'the device name shown in your credentials')
    .action(async (_o, c: Command) => client.login(opts(c)));
  g(program.command('logout').description('revoke and forget the device credential')).action(async (_o, c: Command) => client.logout(opts(c)));
  j(program.command('whoami').description('the account and team of the stored credential')).action(async (_o, c: Command) => client.whoami(opts(c)));
  paged(j(program.command('teams').description('the teams you belong to'))).action(async (_o, c: Command) => lists.teams(opts(c)));

  const wf = program.command('workflows').description('workflows of your team');
  paged(j(wf.command('list').description('list workflows'))).action(async (_o, c: Command) => lists.workflowsList(opts(c)));
  j(wf.command('get').argument('<ref>', 'slug, slug@version or id').description('show a workflow and its parameters')).action(async (ref: string, _o, c: Command) => client.workflowsGet(ref, opts(c)));
  j(wf.command('push').argument('<file>', 'a workflow JSON file (the export shape)').description('create the workflow, or update it (a new version) when its slug exists'))
    .option('--note <text>', 'snapshot note of the new version')
    .action(async (file: string, _o, c: Command) => client.workflowsPush(file, opts(c)));
  j(wf.command('pull').argument('<ref>', 'slug or slug@version').description('write a workflow\'s export to <slug>.json'))
    .option('-o, --out <file>', 'the file to write (- for stdout)')
    .action(async (ref: string, _o, c: Command) => client.workflowsPull(ref, opts(c)));
  j(wf.command('export').description('export every workflow of the team, one <slug>.json each'))
    .option('--dir <dir>', 'target directory', '.')
    .action(async (_o, c: Command) => client.workflowsExport(opts(c)));

  const collect = (v: string, prev: string[] = []): string[] => [...prev, v];
  j(program.command('run').argument('<ref>', 'workflow slug (slug@version pins a snapshot) or id').description('run a workflow'))
    .option('-p, --param <key=value>', 'a parameter (JSON values are parsed: 20, true, "x"); repeatable', collect)
    .option('--file <key=path>', 'upload a file for a file parameter; repeatable', collect)
    .option('-f, --follow', 'follow progress live, then download the outputs')
    .option('-o, --output-dir <dir>', 'where --follow saves the outputs (default ./gantry-outputs/<task_id>/)')
    .option('--no-download', 'with --follow: do not download the outputs')
    .action(async (ref: string, _o, c: Command) => {
      throw new Exit(await client.run(ref, opts(c)));
    });

  const tasks = program.command('tasks').description('tasks of your team');
  paged(j(tasks.command('list').description('recent tasks')))
    .option('--status <status>', 'only tasks in this state')
    .option('--workflow <slug>', 'only tasks of this workflow (slug or id)')
    .option('--limit <n>', 'rows per page (the same as --per-page)')
    .action(async (_o, c: Command) => lists.tasksList(opts(c)));
  j(tasks.command('get').argument('<id>').description('one task')).action(async (id: string, _o, c: Command) => client.tasksGet(id, opts(c)));
  j(tasks.command('cancel').argument('<id>').description('cancel a task that is not terminal')).action(async (id: string, _o, c: Command) => client.tasksCancel(id, opts(c)));
  j(tasks.command('tail').argument('<id>').description('follow a task\'s events until it ends')).action(async (id: string, _o, c: Command) => {
    throw new Exit(await client.tasksTail(id, opts(c)));
  });

  const agents = program.command('agents').description('agents of your team');
  paged(j(agents.command('list').description('list agents'))).action(async (_o, c: Command) => lists.agentsList(opts(c)));

  const ct = program.command('containers').description('container services of your team');
  paged(j(ct.command('list').description('list container services'))).action(async (_o, c: Command) => lists.containersList(opts(c)));
  j(ct.command('get').argument('<ref>', 'slug or id').description('one container service with its instances')).action(async (ref: string, _o, c: Command) => client.containersGet(ref, opts(c)));
  j(ct.command('create').argument('<file>', 'a JSON file with the service definition').description('create a container service')).action(async (file: string, _o, c: Command) => client.containersCreate(file, opts(c)));
  for (const op of ['deploy', 'start', 'stop', 'undeploy', 'delete'] as const)
    j(ct.command(op).argument('<ref>', 'slug or id').description(`${op} a container service`)).action(async (ref: string, _o, c: Command) => client.containersOp(op, ref, opts(c)));
}

/** Commander's parse errors, in the CLI's own words (`gantry serve: unknown option "--bogus"`). */
function usageError(e: CommanderError, argv: string[], program: Command): string {
  const names = argv.filter((a) => !a.startsWith('-'));
  // the deepest command the arguments name
  let cmd: Command = program;
  for (const n of names) {
    const sub = cmd.commands.find((c) => c.name() === n);
    if (!sub) break;
    cmd = sub;
  }
  const where = pathOf(cmd);
  const help = cmd === program ? usage : cmd.helpInformation();
  const quoted = /'([^']+)'/.exec(e.message)?.[1] ?? '';
  if (e.code === 'commander.unknownCommand') return `gantry: unknown command ${JSON.stringify(quoted)}\n\n${usage}`;
  if (e.code === 'commander.unknownOption') return `${where}: unknown option ${JSON.stringify(quoted)}\n\n${help}`;
  if (e.code === 'commander.excessArguments') {
    const depth = where.split(' ').length - 1;
    const extra = names.slice(depth)[0] ?? '';
    return `${where}: unknown argument ${JSON.stringify(extra)}\n\n${help}`;
  }
  return `${where}: ${e.message.replace(/^error: /, '')}\n\n${help}`;
}

export async function main(argv: string[]): Promise<number> {
  if (argv.length === 0) {
    err(usage);
    return 2;
  }
  const program = build();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (e) {
    if (e instanceof Exit) return e.code;
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help') return 0;
      err(usageError(e, argv, program));
      return 2;
    }
    if (e instanceof ConfigError) {
      err(`gantry: ${e.message}\n`);
      return 78;
    }
    const ce = client.cliErrorOf(e);
    if (ce) {
      err(`gantry: ${ce.message}\n`);
      return ce.exitCode;
    }
    throw e;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`gantry: ${(e as Error)?.stack ?? String(e)}\n`);
    process.exit(1);
  },
);
