"""The `apply_jobs` application: one ApplyJob stream per received event."""

from __future__ import annotations

from typing import Any

from eventsourcing.application import Application

from tidesync.domain.apply_job import ApplyJob


class ApplyJobsApplication(Application[Any]):
    """ApplyJob streams: the lifecycle of every received event on its way to the target."""

    name = "apply_jobs"

    def get_job(self, job_id: object) -> ApplyJob:
        job: object = self.repository.get(job_id)
        assert isinstance(job, ApplyJob)
        return job
