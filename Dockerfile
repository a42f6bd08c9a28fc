# deskbatch desktop image: Xvfb + openbox + Debian chromium + the daemon.
#
#   docker build -t deskbatch .
#   docker run --rm --shm-size=1g \
#     -e DESKBATCH_TOKEN="$(openssl rand -base64 32)" \
#     -p 127.0.0.1:8765:8765 -v deskbatch-data:/home/deskbatch/data deskbatch
#
# - DESKBATCH_TOKEN is REQUIRED: the container binds 0.0.0.0 (so the published
#   port reaches it), and the daemon refuses to bind a non-loopback address
#   without a configured token. Clients send it as `Authorization: Bearer …`.
# - Publish the port on 127.0.0.1 unless other machines should reach it.
# - --shm-size=1g (or --ipc=host): chromium crashes tabs with Docker's 64 MB /dev/shm.
# - No DISPLAY is set, so the daemon starts its own Xvfb + openbox (1280x800
#   unless `--display-size WxH`). Arguments after the image name replace the
#   whole CMD, so repeat it: `docker run … deskbatch node bin/deskbatch.js
#   serve --host 0.0.0.0 --screenshots-dir /home/deskbatch/data/screenshots
#   --downloads-dir /home/deskbatch/data/downloads --display-size 1920x1080`.
# - Everything the daemon writes (screenshots, browser downloads) goes under
#   /home/deskbatch/data, the one volume; the sources are read-only to it.
# - tini is PID 1 (ENTRYPOINT): it forwards SIGTERM to node and reaps the
#   zombies chromium leaves; `docker run --init` is then not needed.
# - Runs as the non-root user `deskbatch`. Chromium runs without its sandbox
#   (Playwright's default), as in most containers.
FROM node:20-bookworm-slim

# The ONE package list, shared with scripts/setup.sh; tini is container-only.
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/system-packages.txt /tmp/system-packages.txt
RUN apt-get update \
 && sed -e 's/#.*//' /tmp/system-packages.txt \
    | xargs apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* /tmp/system-packages.txt \
 && mkdir -p /tmp/.X11-unix && chmod 1777 /tmp/.X11-unix

RUN useradd --create-home --uid 10001 --user-group --shell /bin/bash deskbatch \
 && mkdir -p /home/deskbatch/data/screenshots /home/deskbatch/data/downloads \
 && chown -R deskbatch:deskbatch /home/deskbatch/data

# Dependencies first, for layer caching. tsx (which runs the TypeScript
# sources) is a runtime dependency, so --omit=dev keeps everything needed.
# Playwright downloads no browser: it drives /usr/bin/chromium.
WORKDIR /opt/deskbatch
COPY package.json package-lock.json ./
RUN PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --omit=dev --no-audit --no-fund \
 && npm cache clean --force

# The sources (.dockerignore keeps out tests, docs, node_modules, artifacts).
# Owned by root and read-only for the daemon's user.
COPY . .

ENV NODE_ENV=production
USER deskbatch
VOLUME ["/home/deskbatch/data"]
EXPOSE 8765

# node, not curl: the image has no curl. /healthz answers 200 {"status":"ok"}.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "const r = require('http').get('http://127.0.0.1:8765/healthz', (res) => process.exit(res.statusCode === 200 ? 0 : 1)); r.on('error', () => process.exit(1)); r.setTimeout(4000, () => process.exit(1));"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "bin/deskbatch.js", "serve", "--host", "0.0.0.0", \
     "--screenshots-dir", "/home/deskbatch/data/screenshots", "--downloads-dir", "/home/deskbatch/data/downloads"]
