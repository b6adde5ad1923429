# The remediate image: the same image runs `remediate serve` (the chart's Deployment, as uid 10001)
# and `remediate agent` (the DaemonSet, as root with a few capabilities; see helm/remediate/values.yaml).
#   docker build -t ghcr.io/<you>/remediate:0.1.0 .
# NVML comes from the host driver through the NVIDIA container runtime (nvidia-ml-py only binds to it).
FROM python:3.11-slim AS build
WORKDIR /src
# constraints.txt pins every package remediate[postgres] installs to the version the test suite ran on
# (scripts/sync-generated writes it): the image is reproducible, not whatever is newest the day it is built.
COPY pyproject.toml README.md constraints.txt ./
COPY remediate ./remediate
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt ".[postgres]" && cp constraints.txt /wheels/

FROM python:3.11-slim
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin remediate
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels -c /wheels/constraints.txt "remediate[postgres]" \
    && rm -rf /wheels
USER 10001
ENV PYTHONUNBUFFERED=1
EXPOSE 9095 9096
ENTRYPOINT ["remediate"]
CMD ["serve", "--config", "/etc/remediate/config.yaml"]
