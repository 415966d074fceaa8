# One image: the operator (entrypoint), the minimal worker lease renewer (agentrun-worker)
# and the example agents (with the langgraph extra: agentrun.examples.langgraph_agent).
#
# From a clone, with network (pip fetches the dependencies and the build backend from PyPI
# in the first stage, which builds the two distributions' wheels from the sources, the
# worker SDK's (sdk/) and the operator's; .dockerignore sends only what they are built
# from):
#   buildah bud --isolation chroot -t agentrun-operator:dev .
#   docker build -t agentrun-operator:dev .
# (--isolation chroot: buildah's default, oci, fails on hosts whose runtime refuses their
# cgroups, such as the project's machines.)
#
# BASE defaults to python:3.11-slim, what a Docker user gets: that base is NOT tested here
# (the project's machines reach no container registry). The project's own build
# (`make image`: tests/support/cluster/images.py) uses a Debian bookworm base made by
# mmdebstrap, and runs offline: its context holds the same sources plus wheels/ (every
# dependency's wheel and the build backend's, downloaded by the host) and it passes
#   --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/src/wheels
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
# pip's own settings, from the environment; pip ignores an empty one (PyPI, then).
ARG PIP_NO_INDEX=
ARG PIP_FIND_LINKS=
COPY . /src/
# Behind a proxy that re-signs TLS, give pip its CA: --secret id=pip-ca,src=<CA bundle>.
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && python3 -m venv /opt/agentrun \
 && /opt/agentrun/bin/pip install --no-cache-dir --disable-pip-version-check \
        /src/sdk '/src[langgraph]'

FROM ${BASE}
COPY --from=build /opt/agentrun /opt/agentrun
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin agentrun
ENV PATH=/opt/agentrun/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["agentrun-operator"]
CMD ["run"]
