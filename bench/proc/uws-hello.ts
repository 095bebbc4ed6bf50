/**
 * P1's peer: the bare uWebSockets.js "hello" server (same library and build as the Gantry edge),
 * in its own process. Listens on 127.0.0.1:<port> (argv[2], 0 = any free port) and prints
 * {"port": N} on stdout once listening. Stops on SIGTERM/SIGINT.
 */
import uWS, { type us_listen_socket, type us_socket } from 'uWebSockets.js';

const port = Number(process.argv[2] ?? 0);
let listenSocket: us_listen_socket | null = null;
uWS
  .App()
  .get('/*', (res) => {
    res.end('hello');
  })
  .listen('127.0.0.1', port, (s) => {
    if (!s) {
      console.error(`uws-hello: could not listen on 127.0.0.1:${port}`);
      process.exit(1);
    }
    listenSocket = s;
    process.stdout.write(`${JSON.stringify({ port: uWS.us_socket_local_port(s as unknown as us_socket) })}\n`);
  });

const stop = (): void => {
  if (listenSocket) uWS.us_listen_socket_close(listenSocket);
  listenSocket = null;
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
