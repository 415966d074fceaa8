# One image: the operator (and, in later issues, the worker SDK and example worker).
# Not built on the development machines (no container engine there); CI with Docker builds it.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --uid 65532 --no-create-home agentrun
USER 65532
ENTRYPOINT ["agentrun-operator"]
CMD ["run"]
