# One Bun container: the API, with migrations applied at start.
FROM oven/bun:1.4 AS dependencies
WORKDIR /app
COPY package.json bun.lock ./
# patches/: fixes to postgres-js that bun install applies (docs/architecture.md, "When PostgreSQL goes away").
COPY patches ./patches
RUN bun install --frozen-lockfile --production

FROM oven/bun:1.4
WORKDIR /app
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data
COPY --from=dependencies /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY drizzle ./drizzle
COPY src ./src
# The image's unprivileged "bun" user owns the embedded database directory; nothing else is writable.
RUN mkdir -p /data && chown bun:bun /data && chmod 700 /data
USER bun
VOLUME ["/data"]
EXPOSE 3000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bun", "-e", "const r = await fetch(`http://127.0.0.1:${process.env.PORT}/healthz`).catch(() => null); process.exit(r?.ok ? 0 : 1)"]
CMD ["bun", "src/main.ts"]
