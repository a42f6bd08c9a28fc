# deskbatch desktop image: Xvfb + openbox + Debian chromium + the daemon.
#
#   docker build -t deskbatch:0.1.0 .
#   export DESKBATCH_TOKEN="$(openssl rand -hex 32)"
#   docker run --rm --shm-size=1g --stop-timeout=30 \
#     --cap-drop ALL --security-opt no-new-privileges \
#     --read-only --tmpfs /tmp:size=1g -e DESKBATCH_TOKEN \
#     -p 127.0.0.1:8765:8765 -v deskbatch-data:/home/deskbatch/data deskbatch:0.1.0
#
# docs/DEPLOY.md has the whole story (one desktop, Compose, a Kubernetes fleet);
# deploy/ has the files. The machine that wrote it has no Docker engine:
# `npm run image:test` (scripts/image-test.sh) builds it there with podman on a
# Debian 13 base made with debootstrap, and runs the image's file system in a
# chroot (docs/DEPLOY.md, "Building and trying the image without Docker");
# test/dockerfile.test.ts checks its promises as text on every `npm test`.
#
# - DESKBATCH_TOKEN is REQUIRED: the container binds 0.0.0.0 (so the published
#   port reaches it), and the daemon refuses to bind a non-loopback address
#   without a configured token. The token may hold only letters, digits and
#   . _ ~ - (hex is fine; base64 is not). Clients send it as
#   `Authorization: Bearer …`. It is never baked into the image.
# - Publish the port on 127.0.0.1 unless other machines should reach it; the
#   daemon speaks plain ws:// and http://, so anything beyond one host needs TLS
#   in front (docs/DEPLOY.md).
# - Endpoints on the same port (docs/OPERATIONS.md): /v1 (the protocol, token),
#   /healthz (liveness, no token), /readyz (readiness, no token), /metrics
#   (Prometheus, token), /viewer (the live viewer page; docs/VIEWER.md). The
#   viewer opened as http://127.0.0.1:PORT/viewer needs no --allow-origin; one
#   opened through a host name (an ingress) needs `--allow-origin` with the
#   exact origin the browser shows.
# - --shm-size=1g (or --ipc=host): chromium crashes tabs with Docker's 64 MB /dev/shm.
# - --stop-timeout=30: on SIGTERM the daemon cancels running batches, sends
#   their results and exits within its shutdown deadline (10 s by default, plus
#   a 2 s hard margin). Docker's default stop timeout is 10 s, shorter than that.
# - --read-only works: everything else the processes write goes to /tmp (Xvfb
#   sockets and its authority files, Chromium's profile and download staging),
#   so give /tmp a tmpfs; HOME stays read-only.
# - No DISPLAY is set, so the daemon starts its own Xvfb + openbox (1280x800
#   unless `--display-size WxH`). Arguments after the image name replace the
#   whole CMD, so repeat it: `docker run … deskbatch:0.1.0 node bin/deskbatch.js
#   serve --host 0.0.0.0 --screenshots-dir /home/deskbatch/data/screenshots
#   --downloads-dir /home/deskbatch/data/downloads
#   --recordings-dir /home/deskbatch/data/recordings --display-size 1920x1080`
#   (add `--record` to record sessions: docs/RECORDING.md).
# - Everything the daemon keeps (screenshots, browser downloads, recordings) goes under
#   /home/deskbatch/data, the one volume; its code is read-only to it.
# - The daemon and its desktop workers run compiled JavaScript (dist/, made by
#   scripts/build.js in the build stage) with no loader: the image holds no
#   TypeScript sources, no tsx and no esbuild.
# - Nothing only the package managers wanted: apt's downloaded .deb files go
#   in the step that installs them; of Debian's `novnc` only the static files
#   the viewer serves are copied (the package would bring python3-numpy,
#   websockify and their Python libraries); npm's builds of sharp for other
#   platforms are removed; Vulkan's validation layer (a developer's debugging
#   aid in the chromium package) is not unpacked.
# - tini is PID 1 (ENTRYPOINT, exec form): it forwards SIGTERM to node (the
#   CMD is exec form too, so no shell sits in between) and reaps the zombies
#   chromium leaves; `docker run --init` is then not needed.
# - Runs as uid:gid 10001:10001 (the user `deskbatch`), numeric so that
#   Kubernetes' runAsNonRoot can verify it; it needs no capability, so drop
#   them all (--cap-drop ALL) and forbid gaining any (no-new-privileges).
# - Chromium's renderer sandbox: the daemon asks for it (not root here) and
#   falls back to running without it where the kernel or the container runtime
#   forbids unprivileged user namespaces (Docker's default seccomp profile
#   does); /readyz's `containment.browser_sandbox` says which (docs/SECURITY.md).
# - Chromium's managed policy (scripts/chromium-policy.json) shuts the
#   browser's own interface to the model: no file://, chrome://, view-source:
#   or DevTools pages, no native file dialogs (src/browser/policy.ts).
# - Node.js is Debian's own `nodejs` package, which Debian patches: upstream
#   Node 20 reached its end of life in April 2026, so the official node:20
#   images no longer get security fixes. Debian 13 (trixie) ships nodejs
#   20.19. BASE names another Debian 13 base (a mirror, or a root file system
#   made locally with debootstrap and imported) where docker.io is not reachable.
ARG BASE=docker.io/library/debian:trixie-slim

# Stage 1: node_modules, installed by Debian's npm. npm stays in this stage and
# the next: it brings about 400 packages (its own JavaScript dependencies, C
# headers, node-gyp) that the daemon never runs.
FROM ${BASE} AS deps
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The daemon runs compiled JavaScript (stage 2), so --omit=dev keeps
# everything it needs and leaves out tsx and esbuild. Playwright downloads no
# browser: it drives /usr/bin/chromium. sharp's and nut-js's native parts come prebuilt
# in npm packages for linux-x64 and glibc, which this stage shares with the
# next (the same BASE).
WORKDIR /opt/deskbatch
COPY package.json package-lock.json ./
# Behind a proxy that re-signs TLS, npm needs that proxy's CA: pass a PEM bundle
# as the build secret npm_ca (`docker build --secret id=npm_ca,src=FILE`, the
# same flag for podman). It is mounted for the two npm ci steps only, never
# stored in a layer; without it they use the system's CA roots.
# Debian's npm (9) installs sharp's prebuilt libvips for musl as well as
# glibc (it ignores the packages' `libc` field) and its WebAssembly build
# (which names no platform): 29 MiB the daemon never loads, removed.
RUN --mount=type=secret,id=npm_ca \
    if [ -s /run/secrets/npm_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/npm_ca; fi \
 && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --omit=dev --no-audit --no-fund \
 && rm -rf node_modules/@img/sharp-*musl* node_modules/@img/sharp-wasm32

# Stage 2: the build: dist/, the JavaScript the daemon runs, compiled from src/
# and toolsets/ by scripts/build.js with esbuild, a dev dependency: this stage
# installs them all (the npm cache of stage 1 serves most), and only dist/
# leaves it.
FROM deps AS build
RUN --mount=type=secret,id=npm_ca \
    if [ -s /run/secrets/npm_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/npm_ca; fi \
 && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts/build.js scripts/image-smoke.ts ./scripts/
COPY src ./src
COPY toolsets ./toolsets
RUN node scripts/build.js

# Stage 3: noVNC's static files. The viewer serves noVNC's ES modules, core/
# and vendor/, from /usr/share/novnc (src/viewer/novnc.ts); Debian's `novnc`
# package would also install websockify, python3-numpy and a dozen Python
# libraries the image never runs. So its .deb is downloaded and unpacked here,
# and only those folders and its copyright leave.
FROM ${BASE} AS novnc
RUN apt-get update \
 && cd /tmp && apt-get download novnc \
 && dpkg-deb --extract novnc_*.deb /novnc \
 && rm -rf /var/lib/apt/lists/*

# Stage 4: the image.
FROM ${BASE}
ARG BASE

LABEL org.opencontainers.image.title="deskbatch" \
      org.opencontainers.image.description="Desktop (Xvfb, openbox, Chromium) with the deskbatch daemon: batches of Claude computer and browser toolset calls over WebSocket" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="${BASE}"

# The ONE package list, shared with scripts/setup.sh, but `novnc` (its files
# come from the stage above); tini and nodejs are container-only (setup.sh
# checks the machine's own Node.js instead). apt-get clean in the same step:
# the downloaded .deb files (333 MiB) never reach a layer.
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/system-packages.txt /tmp/system-packages.txt
RUN printf '%s\n' 'path-exclude /usr/lib/chromium/libVkLayer_khronos_validation.so' \
      >/etc/dpkg/dpkg.cfg.d/deskbatch-excludes \
 && apt-get update \
 && sed -e 's/#.*//' /tmp/system-packages.txt | tr -s ' \t' '\n\n' | grep -vx -e '' -e novnc \
    | xargs apt-get install -y --no-install-recommends tini nodejs \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /tmp/system-packages.txt \
 && mkdir -p /tmp/.X11-unix && chmod 1777 /tmp/.X11-unix
COPY --from=novnc /novnc/usr/share/novnc/core /usr/share/novnc/core
COPY --from=novnc /novnc/usr/share/novnc/vendor /usr/share/novnc/vendor
COPY --from=novnc /novnc/usr/share/doc/novnc/copyright /usr/share/doc/novnc/copyright
COPY scripts/chromium-policy.json /etc/chromium/policies/managed/deskbatch.json

RUN useradd --create-home --uid 10001 --user-group --shell /bin/bash deskbatch \
 && mkdir -p /home/deskbatch/data/screenshots /home/deskbatch/data/downloads /home/deskbatch/data/recordings \
 && chown -R deskbatch:deskbatch /home/deskbatch/data

# Dependencies first, for layer caching; the code after them.
WORKDIR /opt/deskbatch
COPY --from=deps /opt/deskbatch/node_modules ./node_modules

# What runs: the entry point, package.json (its "type" and version), Chromium's
# policy (the daemon checks it is in force) and the compiled code, which
# includes scripts/image-smoke.ts for scripts/image-test.sh. Owned by root and
# read-only for the daemon's user.
COPY package.json ./
COPY bin ./bin
COPY scripts/chromium-policy.json ./scripts/
COPY --from=build /opt/deskbatch/dist ./dist

ENV NODE_ENV=production
USER 10001:10001
VOLUME ["/home/deskbatch/data"]
EXPOSE 8765

# Liveness: /healthz answers 200 {"status":"ok"} while the process serves HTTP.
# Readiness (/readyz) is for orchestrators (deploy/compose.yaml, deploy/k8s/).
# node, not curl: the image has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "const r = require('http').get('http://127.0.0.1:8765/healthz', (res) => process.exit(res.statusCode === 200 ? 0 : 1)); r.on('error', () => process.exit(1)); r.setTimeout(4000, () => process.exit(1));"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "bin/deskbatch.js", "serve", "--host", "0.0.0.0", \
     "--screenshots-dir", "/home/deskbatch/data/screenshots", "--downloads-dir", "/home/deskbatch/data/downloads", \
     "--recordings-dir", "/home/deskbatch/data/recordings"]
