"""Distributed indexing on Ray: the new blobs a run prepares (chunk, hold back, extract) and the texts it embeds,
spread over a Ray cluster. The driver keeps what needs the mirrors (fetch, scan, reading each new blob's
bytes) and the caches; workers get bytes or texts and give back blob entries or vectors, which the driver
caches as each batch lands. Preparing is a pure function of a blob, and embedding the same batches with the
same model gives the same vectors, so a distributed run publishes what a local run of the same commits does.

Ray starts only when a run has work worth its start: a run with nothing new, or as little as one commit brings,
prepares and embeds here and never touches it. A worker that dies mid-batch costs that batch again (a task is
retried, an embedding actor restarted and its batch resubmitted), never a wrong or missing row.

Addresses: `local` starts a Ray instance on this machine with `workers` CPUs; `auto` joins the one `ray start`
runs here; HOST:PORT a cluster's head from one of its nodes; `ray://HOST:PORT` a remote cluster through Ray
Client. Every node needs blobdex (`pip install blobdex[cluster]`, the model is in the package) and, where the
cluster uses token authentication, the same RAY_AUTH_TOKEN as this process.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import numpy as np

from indexer.config import cluster_address_problem
from indexer.errors import BlobdexError
from indexer.vectors import EMBED_BATCH

log = logging.getLogger(__name__)

RETRIES = 3  # a batch whose worker died is run again this many times
IN_FLIGHT_PER_WORKER = 2  # batches queued per worker: the next starts as one lands, without flooding memory
GPU_BATCH = 1024  # texts per call to a GPU actor: a GPU is idle between calls, so it gets fewer, bigger ones
CONNECT_SECONDS = 5
# Ray's start (3-5 s, and a model load per actor) is paid only for work that would take longer here: fewer new
# blobs than this are prepared in this process (about 5 s of it), fewer texts than one batch embedded here.
LOCAL_BLOBS = 2000
LOCAL_TEXTS = EMBED_BATCH


class ClusterError(BlobdexError):
    """The cluster cannot be reached or used; the message says which and what to do."""


def _prepare_batch(items: list[tuple[str, bytes, str]], max_bytes: int) -> list[tuple[str, object]]:
    """On a worker: each blob's entry, as the run's chunk stage prepares it here."""
    from indexer.changes import prepared

    return [(key, prepared(key, data, lang, max_bytes)) for key, data, lang in items]


class _Encoder:
    """An embedding actor: one model load, then batches of texts."""

    def __init__(self, model: str, encoder: str):
        from indexer.embed import load_embedder

        self.embedder = load_embedder(model, encoder)

    def dim(self) -> int:
        return self.embedder.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)


class Cluster:
    """A Ray cluster for one run, started or joined when the run first has work for it."""

    def __init__(self, address: str, workers: int = 0):
        if problem := cluster_address_problem(address):
            raise ClusterError(f"--cluster {problem}")
        self.address, self.workers = address, workers
        self._ray = None
        self.encoders: list = []
        self.batch = EMBED_BATCH
        self.blobs = self.texts = 0  # the work done there, for the run's report
        self.gpus = 0  # embedding actors on GPUs (0: on CPUs)
        self.used = False

    def worth(self, blobs: int = 0, texts: int = 0) -> bool:
        """Whether this much work goes to the cluster: always once it is joined, else only past Ray's start."""
        return self._ray is not None or blobs >= LOCAL_BLOBS or texts >= LOCAL_TEXTS

    def _connect(self):
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError as exc:
            raise ClusterError("--cluster needs Ray: pip install 'blobdex[cluster]' (make install has it)") from exc
        self._reachable()
        # Ray's own lines (a started instance, its token file) are not the run's output: errors still reach the log.
        options = {
            "include_dashboard": False,
            "log_to_driver": False,
            "ignore_reinit_error": True,
            "logging_level": logging.ERROR,
        }
        try:
            if self.address == "local":
                ray.init(num_cpus=self.workers or os.cpu_count(), **options)
            else:
                ray.init(address=self.address, **options)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError and its own types
            raise ClusterError(
                f"cannot reach the Ray cluster at {self.address!r}: {_first_line(exc)}; start one with "
                f"'ray start --head' or pass --cluster local"
            ) from exc
        self._ray, self.used = ray, True
        if not self.workers:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        log.info("ray: %s, %d workers", self.address, self.workers)
        return ray

    def _reachable(self) -> None:
        """A refused or silent address said in a few seconds (Ray itself retries for minutes before giving up)."""
        if self.address in ("local", "auto"):
            return
        host, _, port = self.address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
        except OSError as exc:
            raise ClusterError(
                f"cannot reach the Ray cluster at {self.address!r}: {exc.strerror or exc}; is its head node up "
                f"('ray start --head'), and is this the port it listens on?"
            ) from exc

    def _get(self, ref, what: str):
        """A task's result, or one sentence when it failed on every try."""
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            raise ClusterError(f"the Ray cluster failed to {what} after {RETRIES} retries: {_first_line(exc)}") from exc

    def prepare(self, batches: Iterator[list[tuple[str, bytes, str]]], max_bytes: int) -> Iterator[list]:
        """Blob entries for batches of (cache key, bytes, lang), as each batch lands (in any order)."""
        ray = self._connect()
        remote = ray.remote(max_retries=RETRIES)(_prepare_batch)
        pending: list = []
        for batch in batches:
            pending.append(remote.remote(batch, max_bytes))
            self.blobs += len(batch)
            while len(pending) >= self.workers * IN_FLIGHT_PER_WORKER:
                done, pending = ray.wait(pending, num_returns=1)
                yield self._get(done[0], "prepare a batch of blobs")
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield self._get(done[0], "prepare a batch of blobs")

    def _start_encoders(self, model: str, encoder: str) -> None:
        """One actor per GPU where the cluster has GPUs (torch, bigger batches), else one per worker CPU, each
        running the configured encoder on one core (OMP_NUM_THREADS, which Ray sets to an actor's CPUs)."""
        ray = self._ray
        gpus = self.gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus:
            actor = ray.remote(max_restarts=-1, max_task_retries=RETRIES, num_gpus=1)(_Encoder)
            self.encoders = [actor.remote(model, "torch") for _ in range(gpus)]
            self.batch = GPU_BATCH
        else:
            actor = ray.remote(max_restarts=-1, max_task_retries=RETRIES, num_cpus=1)(_Encoder)
            self.encoders = [actor.remote(model, encoder) for _ in range(self.workers)]
        log.info("ray: %d embedding actors (%s)", len(self.encoders), "GPU" if gpus else "CPU")

    def dim(self, model: str, encoder: str) -> int:
        """The model's dimension, as an embedding actor has it loaded."""
        self._connect()
        if not self.encoders:
            self._start_encoders(model, encoder)
        return self._get(self.encoders[0].dim.remote(), "load the model")

    def embed(self, model: str, encoder: str, items: list[tuple[str, str]]) -> Iterator[tuple[list[str], np.ndarray]]:
        """Vectors of (id, text) items, in batches as they land: (ids, vectors). Each actor loads the model once;
        an actor that dies is restarted and its batch run again."""
        self._connect()
        if not self.encoders:
            self._start_encoders(model, encoder)
        queue = [items[start : start + self.batch] for start in range(0, len(items), self.batch)]
        running: dict = {}
        free = list(self.encoders)
        while queue or running:
            while queue and free:
                batch, actor = queue.pop(0), free.pop(0)
                running[actor.embed.remote([text for _, text in batch])] = ([i for i, _ in batch], actor)
            done, _ = self._ray.wait(list(running), num_returns=1)
            ids, actor = running.pop(done[0])
            free.append(actor)
            vectors = self._get(done[0], "embed a batch of texts")
            self.texts += len(ids)
            yield ids, vectors

    def summary(self) -> dict | None:
        """What the run did on the cluster (the report's `cluster`), or None when it did all its work here."""
        if not self.used:
            return None
        return {
            "address": self.address,
            "workers": self.workers,
            "gpus": self.gpus,
            "blobs": self.blobs,
            "texts": self.texts,
        }

    def close(self) -> None:
        if self._ray is not None:
            for actor in self.encoders:
                self._ray.kill(actor)
            self.encoders = []
            self._ray.shutdown()  # stops an instance started here; leaves a joined cluster running
            self._ray = None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
