"""`/metrics` on `blobdex serve`: request counts and latencies (indexer.observe), MCP tool latencies, and the
served snapshot as gauges (its id and model, age, chunks, repos by status, the last index run), read at scrape
time from the snapshot being served."""

from __future__ import annotations

from datetime import datetime, timezone

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from starlette.requests import Request
from starlette.responses import Response

from indexer import runs
from indexer.observe import exposition


class SnapshotCollector:
    """The served snapshot's figures, collected on each scrape (a snapshot that cannot be read yields none)."""

    def __init__(self, service):
        self.service = service

    def collect(self):
        serving = self.service.live.serving
        if serving is None:
            return
        manifest = serving.manifest
        info = GaugeMetricFamily("blobdex_snapshot_info", "The snapshot served", labels=["snapshot_id", "model"])
        info.add_metric([manifest.snapshot_id, manifest.model_id], 1)
        yield info
        created = datetime.strptime(manifest.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        age = (datetime.now(timezone.utc) - created).total_seconds()
        yield GaugeMetricFamily("blobdex_snapshot_age_seconds", "Seconds since the served snapshot was built", age)
        yield GaugeMetricFamily("blobdex_snapshot_chunks", "Chunks in the served snapshot", manifest.chunks)
        repos = GaugeMetricFamily("blobdex_repos", "Repos in the served snapshot by status", labels=["status"])
        for status in ("ok", "stale"):
            repos.add_metric([status], sum(r.status == status for r in manifest.repos))
        yield repos
        last = runs.last(self.service.cfg.data_dir)
        if last is not None:
            ended = datetime.strptime(last["ended_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            yield GaugeMetricFamily(
                "blobdex_last_run_timestamp_seconds", "When the last index run ended", ended.timestamp()
            )
            ok = 1.0 if last.get("ok") and not last.get("error") else 0.0
            yield GaugeMetricFamily("blobdex_last_run_ok", "1 when the last index run had no failure", ok)


def registry(service) -> CollectorRegistry:
    own = CollectorRegistry(auto_describe=False)
    own.register(SnapshotCollector(service))
    return own


async def metrics(request: Request) -> Response:
    body, content_type = exposition(request.app.state.metrics)
    return Response(body, media_type=content_type)
