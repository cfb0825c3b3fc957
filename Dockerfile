# One Bun container: the API, with migrations applied at start.
# BUN_IMAGE is the base: the official Bun image by default. Where no registry can be reached, build a
# local stand-in and pass its tag (README, "Docker"; .ci/container.sh builds one from Debian).
ARG BUN_IMAGE=oven/bun:1.4.5
FROM ${BUN_IMAGE} AS dependencies
WORKDIR /app
COPY package.json bun.lock ./
# patches/: fixes to postgres-js that bun install applies (docs/architecture.md, "When PostgreSQL goes away").
COPY patches ./patches
RUN bun install --frozen-lockfile --production

FROM ${BUN_IMAGE}
WORKDIR /app
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data
COPY --from=dependencies /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY drizzle ./drizzle
COPY src ./src
# The base image's unprivileged "bun" user (uid 1000) owns the embedded database directory; nothing else is writable.
RUN mkdir -p /data && chown bun:bun /data && chmod 700 /data
USER bun
VOLUME ["/data"]
EXPOSE 3000
# SIGTERM drains: bun is PID 1 (the base image's entrypoint execs it), stops accepting, lets in-flight
# requests finish (up to 10 s), stops the delivery worker, closes the database, flushes logs, exits 0.
STOPSIGNAL SIGTERM
# Ready = the database answers (/readyz). The image has no curl: bun's own fetch.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bun", "-e", "const r = await fetch(`http://127.0.0.1:${process.env.PORT}/readyz`).catch(() => null); process.exit(r?.ok ? 0 : 1)"]
CMD ["bun", "src/main.ts"]
