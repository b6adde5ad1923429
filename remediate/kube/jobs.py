"""A batch/v1 Job as remediate reads it back: whether it finished, and how (the `Complete` / `Failed`
conditions the Job controller sets; since 1.31 it sets `SuccessCriteriaMet` / `FailureTarget` first, and
remediate waits for the final ones, which come once the pods are gone), and the calls that create one, read it
and read its pod's log (`JobCalls`, over a KubeClient's configuration and its error translation)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from remediate.kube.errors import translate

if TYPE_CHECKING:
    from remediate.kube.client import KubeClient

T = TypeVar("T")

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on its pods (1.27+; `job-name` before, still set beside it)."""


@dataclass(frozen=True)
class JobState:
    namespace: str
    name: str
    uid: str
    complete: bool
    failed: bool
    reason: str = ""
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.complete or self.failed


def job_state(job: Any) -> JobState:
    """From the official client's V1Job."""
    meta, status = job.metadata, job.status
    complete = failed = False
    reason = message = ""
    for condition in (status.conditions if status is not None else None) or ():
        if condition.status != "True":
            continue
        if condition.type == "Complete":
            complete = True
        elif condition.type == "Failed":
            failed, reason, message = True, condition.reason or "", condition.message or ""
    return JobState(meta.namespace or "", meta.name or "", meta.uid or "", complete, failed, reason, message)


@dataclass(frozen=True)
class JobCalls:
    """batch/v1 Jobs through `client`'s official ApiClient; every error translated as the client's own calls."""

    client: KubeClient

    def _call(self, what: str, function: Callable[[Any, Any], T]) -> T:
        from kubernetes import client as official

        core = self.client.core_api()
        try:
            return function(official.BatchV1Api(core.api_client), core)
        except Exception as exc:
            raise translate(exc, what) from exc

    def create(self, namespace: str, body: dict[str, Any]) -> JobState:
        """POST batch/v1 jobs: KubeConflict when a Job of that name exists already (an earlier attempt's)."""
        timeout = self.client.timeout
        return self._call(
            f"POST jobs/{namespace}/{body['metadata']['name']}",
            lambda batch, _core: job_state(batch.create_namespaced_job(namespace, body, _request_timeout=timeout)),
        )

    def get(self, namespace: str, name: str) -> JobState:
        timeout = self.client.timeout
        return self._call(
            f"GET jobs/{namespace}/{name}",
            lambda batch, _core: job_state(batch.read_namespaced_job(name, namespace, _request_timeout=timeout)),
        )

    def log(self, namespace: str, name: str) -> str:
        """The log of the newest pod of Job `name` (label JOB_NAME_LABEL); "" when it has none."""
        selector, timeout = f"{JOB_NAME_LABEL}={name}", self.client.timeout

        def read(_batch: Any, core: Any) -> str:
            pods = core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=timeout).items
            if not pods:
                return ""
            newest = max(pods, key=lambda pod: str(pod.metadata.creation_timestamp or ""))
            text: str = core.read_namespaced_pod_log(newest.metadata.name, namespace, _request_timeout=timeout)
            return text

        return self._call(f"GET jobs/{namespace}/{name} pod log", read)
