# Gantry node image: Node 20 on Debian 12 (glibc: uWebSockets.js ships glibc binaries), the sources
# run through tsx (no build step), non-root, data in /var/lib/gantry.
#   docker build -t gantry .
#   docker run -p 8080:8080 -p 50051:50051 -v gantry-data:/var/lib/gantry gantry
# BASE_IMAGE: the Node 20 glibc image every stage starts from (a mirror, a pinned digest, or a
# locally made base: test/deploy/dockerfile.test.ts builds on one imported from the host's node).
ARG BASE_IMAGE=node:20-slim
FROM ${BASE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# the SDK workspace (packages/sdk): the CLI's client commands are built on it
COPY packages/sdk/package.json ./packages/sdk/
# the project's own `prepare` (the console build) needs the dev dependencies and scripts/, neither of
# which is here (the console has its stage below): dropped from this stage's copy of package.json
# only; the dependencies' install scripts still run
RUN npm pkg delete scripts.prepare && npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# the web console: built with the dev dependencies (vite, preact, the SDK) in a stage of its own;
# only its static output (console/dist) goes into the image
FROM ${BASE_IMAGE} AS console
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages ./packages
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY scripts/build-console.mjs ./scripts/
COPY console ./console
RUN node scripts/build-console.mjs && test -f console/dist/index.html

FROM ${BASE_IMAGE}
ENV NODE_ENV=production \
    GANTRY_HTTP_HOST=0.0.0.0 \
    GANTRY_HTTP_PORT=8080 \
    GANTRY_GRPC_PORT=50051 \
    GANTRY_CLUSTER_PORT=50061 \
    GANTRY_DATA_DIR=/var/lib/gantry
WORKDIR /app
RUN groupadd --system --gid 10001 gantry \
 && useradd --system --uid 10001 --gid gantry --home-dir /var/lib/gantry --shell /usr/sbin/nologin gantry \
 && mkdir -p /var/lib/gantry && chown gantry:gantry /var/lib/gantry
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json tsconfig.json ./
COPY bin ./bin
COPY proto ./proto
COPY src ./src
COPY packages ./packages
COPY --from=console /app/console/dist ./console/dist
USER 10001:10001
VOLUME ["/var/lib/gantry"]
# HTTP (REST, SSE, /storage), agent gRPC, node-to-node gRPC (cluster mode)
EXPOSE 8080 50051 50061
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.GANTRY_HTTP_PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# exec form: SIGTERM reaches node (graceful stop: drain HTTP, leave the cluster, close)
ENTRYPOINT ["node", "bin/gantry.mjs"]
CMD ["serve"]
