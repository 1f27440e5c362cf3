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
# Dependencies first, in a layer of their own: a change to evalfleet's code
# rebuilds in seconds instead of reinstalling Celery and the rest.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt ${AGENT_PIP_PACKAGES} \
    && rm /tmp/requirements.txt
# The README after the dependencies (the package's metadata names it): editing it
# does not reinstall them.
COPY README.md ./
COPY core core
COPY fleet fleet
COPY worker worker
COPY scheduler scheduler
COPY evalfleet evalfleet
RUN pip install --no-deps .

# Agents run as an unprivileged user. /data holds Flower's state (a volume
# takes this ownership on first use); /experiment is where the matrix folder
# is mounted.
RUN useradd --create-home --uid 10001 evalfleet \
    && mkdir -p /data /experiment \
    && chown evalfleet /data
USER evalfleet
WORKDIR /home/evalfleet
