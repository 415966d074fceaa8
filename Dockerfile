# One image: the operator (entrypoint), the minimal worker lease renewer (agentrun-worker)
# and the example agents (with the langgraph extra: agentrun.examples.langgraph_agent).
#
# The build needs no network: the context holds this file and wheels/ (the project's wheel
# and every dependency's, downloaded by the host). Make that context with
#   python -m tests.support.cluster.images context --out DIR
# then `docker build DIR` (BASE defaults to python:3.11-slim), or let
# `python -m tests.support.cluster.images build project` build it with buildah on a Debian base.
ARG BASE=python:3.11-slim

FROM ${BASE} AS install
COPY wheels/ /wheels/
RUN python3 -m venv /opt/agentrun \
 && /opt/agentrun/bin/pip install --no-cache-dir --disable-pip-version-check \
        --no-index --find-links /wheels 'agentrun-operator[langgraph]'

FROM ${BASE}
COPY --from=install /opt/agentrun /opt/agentrun
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin agentrun
ENV PATH=/opt/agentrun/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["agentrun-operator"]
CMD ["run"]
