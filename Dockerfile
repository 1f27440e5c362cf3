# The evalfleet image: worker, Flower and scheduler of docker-compose.yml.
#
# Add the agent CLIs your evaluation runs at build time, in .env or on the
# command line (docker compose build --build-arg ...):
#   AGENT_APT_PACKAGES="ripgrep jq"                        Debian packages
#   AGENT_NPM_PACKAGES="@anthropic-ai/claude-code @openai/codex opencode-ai"
#                                                          global npm packages (brings Node.js)
#   AGENT_PIP_PACKAGES="aider-chat"                        Python packages
# Anything else: your own Dockerfile that starts FROM evalfleet:latest, runs
# its installs as USER root and ends with USER evalfleet (docs/FLEET.md).
FROM python:3.11-slim

ARG AGENT_APT_PACKAGES=""
ARG AGENT_NPM_PACKAGES=""
ARG AGENT_PIP_PACKAGES=""

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# git: scenario setup commands commonly `git init` the workspace.
RUN set -eux; \
    packages="git ${AGENT_APT_PACKAGES}"; \
    if [ -n "${AGENT_NPM_PACKAGES}" ]; then packages="${packages} nodejs npm"; fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends ${packages}; \
    rm -rf /var/lib/apt/lists/*; \
    if [ -n "${AGENT_NPM_PACKAGES}" ]; then npm install --global ${AGENT_NPM_PACKAGES}; fi

WORKDIR /opt/evalfleet
COPY pyproject.toml README.md ./
COPY core core
COPY worker worker
COPY scheduler scheduler
RUN pip install . ${AGENT_PIP_PACKAGES}

# Agents run as an unprivileged user. /data holds Flower's state (a volume
# takes this ownership on first use); /experiment is where the matrix folder
# is mounted.
RUN useradd --create-home --uid 10001 evalfleet \
    && mkdir -p /data /experiment \
    && chown evalfleet /data
USER evalfleet
WORKDIR /home/evalfleet
