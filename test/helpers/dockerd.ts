/**
 * The run's throwaway Docker daemon (scripts/test-dockerd.mjs, started by scripts/run-tests.mjs for
 * test files that name GANTRY_TEST_DOCKER_HOST): its socket, the busybox test image, a dockerode
 * client, and the daemon's own list of a service's containers (by the gantry labels). `skip` is
 * the reason to skip (naming dockerd) when there is none.
 */
import Dockerode from 'dockerode';

const host = process.env.GANTRY_TEST_DOCKER_HOST ?? '';
export const dockerSocket = host.startsWith('unix://') ? host.slice('unix://'.length) : '';
/** busybox httpd on 8080: GET /health, GET /cgi-bin/env (its environment), POST /cgi-bin/invoke; CRASH=x exits 3 at start. */
export const busyboxImage = process.env.GANTRY_TEST_DOCKER_IMAGE ?? 'gantry-test/busybox-httpd:1';
export const dockerSkip: string | false = dockerSocket
  ? false
  : `dockerd: no test Docker daemon (${process.env.GANTRY_TEST_DOCKER_UNAVAILABLE ?? 'run through scripts/run-tests.mjs, which starts one, or set GANTRY_TEST_DOCKER_HOST=unix:///path'})`;

export const docker = (): Dockerode => new Dockerode({ socketPath: dockerSocket });

/** The daemon's containers (running or not) carrying label=value. */
export async function containersByLabel(d: Dockerode, label: string, value: string): Promise<Dockerode.ContainerInfo[]> {
  return d.listContainers({ all: true, filters: { label: [`${label}=${value}`] } });
}
