# The remediate image: the same image runs `remediate serve` (the chart's Deployment, as uid 10001)
# and `remediate agent` (the DaemonSet, as root with a few capabilities; see helm/remediate/values.yaml).
#   docker build -t ghcr.io/<you>/remediate:0.1.0 .
# NVML comes from the host driver through the NVIDIA container runtime (nvidia-ml-py only binds to it).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY remediate ./remediate
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[postgres]"

FROM python:3.11-slim
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin remediate
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "remediate[postgres]" && rm -rf /wheels
USER 10001
ENV PYTHONUNBUFFERED=1
EXPOSE 9095 9096
ENTRYPOINT ["remediate"]
CMD ["serve", "--config", "/etc/remediate/config.yaml"]
