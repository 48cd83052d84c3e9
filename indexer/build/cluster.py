"""Distributed indexing on Ray: the new blobs a run prepares (chunk, hold back, extract) and the texts it embeds,
spread over a Ray cluster. The driver keeps what needs the mirrors (fetch, scan, reading each new blob's
bytes) and the caches; workers get bytes or texts and give back blob entries or vectors, which the driver
caches as each batch lands. Preparing is a pure function of a blob, and embedding the same batches with the
same model gives the same vectors, so a distributed run publishes what a local run of the same commits does.

Ray starts only when a run has work worth its start: a run with nothing new, or as little as one commit brings,
prepares and embeds here and never touches it. A worker that dies mid-batch costs that batch again (a task is
retried, an embedding actor restarted and its batch resubmitted), never a wrong or missing row.

Addresses (indexer.ray_cluster, which joins): `local` starts a Ray instance on this machine with `workers` CPUs;
`auto` joins the one `ray start` runs here; HOST:PORT a cluster's head from one of its nodes; `ray://HOST:PORT` a
remote cluster through Ray Client. Every node needs blobdex (`pip install blobdex[cluster]`, the model is in the
package) and, where the cluster uses token authentication, the same RAY_AUTH_TOKEN as this process.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator

import numpy as np

from indexer.embed import EMBED_BATCH
from indexer.ray_cluster import ClusterError, check_address, first_line, join
from indexer.versions import TOOLS

log = logging.getLogger(__name__)

RETRIES = 3  # a batch whose worker died is run again this many times
IN_FLIGHT_PER_WORKER = 2  # batches queued per worker: the next starts as one lands, without flooding memory
GPU_BATCH = 1024  # texts per call to a GPU actor: a GPU is idle between calls, so it gets fewer, bigger ones
ACTOR_START_SECONDS = 300  # an embedding actor loads its model in this long, or the cluster cannot place it
# Ray's start (3-5 s, and a model load per actor) is paid only for work that would take longer here: fewer new
# blobs than this are prepared in this process (about 5 s of it), fewer texts than one batch embedded here.
LOCAL_BLOBS = 2000
LOCAL_TEXTS = EMBED_BATCH
LOCAL_ROWS = 100_000  # rows of parts to write: about 5 s of one core (51 µs a row; docs/scale-out.md), past Ray's start


def _prepare_batch(items: list[tuple], max_bytes: int) -> tuple[str, list, list[str]]:
    """On a worker: the tools it prepares with (the driver refuses entries of other versions), each blob's
    entry and what went wrong, as the run's chunk stage prepares them here."""
    from indexer.prepare import prepare_batch

    return (TOOLS.blob_tag(), *prepare_batch(items, max_bytes))


class _Encoder:
    """An embedding actor: one model load, then batches of texts."""

    def __init__(self, model: str, encoder: str):
        from indexer.embed import load_embedder

        self.embedder = load_embedder(model, encoder)

    def ready(self) -> tuple[str, int]:
        """The model id it embeds with and the model's dimension, once it is loaded."""
        return self.embedder.model_id, self.embedder.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)


def _part_files(info: dict, chunks, tables: dict, card_vector, codebook_blob: bytes | None) -> tuple[str, dict]:
    """A part's files (indexer.snapshot.write.part_files), its rows' codes encoded here too: a worker's share of
    writing a part, which the driver then places."""
    from indexer.snapshot.ann import Codebook
    from indexer.snapshot import vector_matrix
    from indexer.snapshot.write import part_files

    codes = None
    if codebook_blob is not None:
        codebook = Codebook(codebook_blob)
        codes = codebook.encode(vector_matrix(chunks, info["dim"])), codebook.digest
    return TOOLS.blob_tag(), part_files(info, chunks, tables, card_vector, codes)


class Cluster:
    """A Ray cluster for one run, started or joined when the run first has work for it."""

    def __init__(self, address: str, workers: int = 0):
        check_address(address)
        self.address, self.workers = address, workers
        self._ray = None
        self.encoders: list = []
        self.batch = EMBED_BATCH
        self.blobs = self.texts = self.parts = 0  # the work done there, for the run's report
        self.gpus = 0  # embedding actors on GPUs (0: on CPUs)
        self.dim = 0  # the model's dimension, as the actors loaded it
        self.used = False

    def worth(self, blobs: int = 0, texts: int = 0, rows: int = 0) -> bool:
        """Whether this much work goes to the cluster: always once it is joined, else only past Ray's start."""
        return self._ray is not None or blobs >= LOCAL_BLOBS or texts >= LOCAL_TEXTS or rows >= LOCAL_ROWS

    def connect(self):
        """Join (or start, for "local") the cluster once; Ray itself, joined."""
        if self._ray is None:
            self._ray, self.used = join(self.address, self.workers), True
            if not self.workers:  # the CPUs free now: an actor asked for beyond them would wait for one forever
                self.workers = max(1, int(self._ray.available_resources().get("CPU", 1)))
            log.info("ray: %s, %d workers", self.address, self.workers)
        return self._ray

    def _get(self, ref, what: str):
        """A task's result, or one sentence when it failed for good (Ray retries a batch whose worker died)."""
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            raise ClusterError(f"the Ray cluster failed to {what}: {first_line(exc)}") from exc

    def prepare(self, batches: Iterator[list[tuple]], max_bytes: int) -> Iterator[tuple]:
        """(entries, problems) for batches of (cache key, bytes, lang[, released lines]), as each lands (any order)."""
        ray = self.connect()
        remote = ray.remote(max_retries=RETRIES)(_prepare_batch)
        pending: list = []
        for batch in itertools.chain(batches, [None]):  # None: the end, where every batch still out is waited for
            if batch is not None:
                pending.append(remote.remote(batch, max_bytes))
                self.blobs += len(batch)
            while pending and (batch is None or len(pending) >= self.workers * IN_FLIGHT_PER_WORKER):
                done, pending = ray.wait(pending, num_returns=1)
                tag, entries, problems = self._get(done[0], "prepare a batch of blobs")
                if tag != TOOLS.blob_tag():
                    raise ClusterError(
                        f"a Ray worker prepares blobs with tools {tag}, this indexer with {TOOLS.blob_tag()}: "
                        f"install the same blobdex version on every node"
                    )
                yield entries, problems

    def part_files(self, parts: Iterator[tuple], codebook_blob: bytes | None) -> Iterator[tuple[tuple, dict]]:
        """(item, its part's files) for items of (key, info, chunks, tables, card_vector, …), built on workers as
        each lands (any order), a few per worker in flight: each item's rows are sent once and let go."""
        ray = self.connect()
        # No CPU asked: the run's embedding actors hold every CPU until it ends (idle while parts are written), and a
        # task asking for one would wait for it forever; spread, so they do not all land on this node.
        remote = ray.remote(max_retries=RETRIES, num_cpus=0, scheduling_strategy="SPREAD")(_part_files)
        codebook_ref = ray.put(codebook_blob)  # once, not with every part
        pending: dict = {}
        for item in itertools.chain(parts, [None]):  # None: the end, where every part still out is waited for
            if item is not None:
                _, info, chunks, tables, card_vector = item[:5]
                pending[remote.remote(info, chunks, tables, card_vector, codebook_ref)] = item
                self.parts += 1
            while pending and (item is None or len(pending) >= self.workers * IN_FLIGHT_PER_WORKER):
                done, _ = ray.wait(list(pending), num_returns=1)
                tag, files = self._get(done[0], "write a part")
                if tag != TOOLS.blob_tag():
                    raise ClusterError(
                        f"a Ray worker writes parts with tools {tag}, this indexer with {TOOLS.blob_tag()}: "
                        f"install the same blobdex version on every node"
                    )
                yield pending.pop(done[0]), files

    def _start_encoders(self, model: str, encoder: str, model_id: str) -> None:
        """One actor per GPU where the run's encoder is torch and the cluster has GPUs (bigger batches), else one
        per worker CPU, each running the encoder on one core (OMP_NUM_THREADS, which Ray sets to an actor's
        CPUs): the encoder a run names is the one every vector comes from, as in a local run. Each actor must
        load the model and name the driver's model id before any batch is sent to it."""
        ray = self._ray
        gpus = int(ray.cluster_resources().get("GPU", 0)) if encoder == "torch" else 0
        if gpus:
            actor = ray.remote(max_restarts=-1, max_task_retries=RETRIES, num_gpus=1)(_Encoder)
            actors, self.batch = [actor.remote(model, encoder) for _ in range(gpus)], GPU_BATCH
        else:
            actor = ray.remote(max_restarts=-1, max_task_retries=RETRIES, num_cpus=1)(_Encoder)
            actors = [actor.remote(model, encoder) for _ in range(self.workers)]
        loaded = {a.ready.remote(): a for a in actors}
        done, late = ray.wait(list(loaded), num_returns=len(loaded), timeout=ACTOR_START_SECONDS)
        for ref in late:  # placed nowhere in time (the cluster is busy): the run goes on with the others
            ray.kill(loaded[ref])
        for ref in done:
            their_id, dim = self._get(ref, "load the model on an embedding actor")
            if their_id != model_id:
                raise ClusterError(
                    f"a Ray worker embeds with {their_id!r}, this indexer with {model_id!r}: install the same "
                    f"blobdex version and model on every node"
                )
            self.dim = dim
        self.encoders, self.gpus = [loaded[ref] for ref in done], gpus if done else 0
        if not self.encoders:
            raise ClusterError(
                f"no embedding actor started on the Ray cluster at {self.address!r} within {ACTOR_START_SECONDS} s: "
                f"it has no free {'GPU' if gpus else 'CPU'}; lower --workers or free the cluster"
            )
        log.info("ray: %d embedding actors (%s)", len(self.encoders), "GPU" if gpus else "CPU")

    def model_dim(self, model: str, encoder: str, model_id: str) -> int:
        """The model's dimension, as the embedding actors have it loaded."""
        self.connect()
        if not self.encoders:
            self._start_encoders(model, encoder, model_id)
        return self.dim

    def embed(
        self, model: str, encoder: str, model_id: str, items: list[tuple[str, str]]
    ) -> Iterator[tuple[list[str], np.ndarray]]:
        """Vectors of (id, text) items, in batches as they land: (ids, vectors). Each actor loads the model once;
        an actor that dies is restarted and its batch run again. Batches still out when the caller stops (a
        backfill's deadline) are cancelled."""
        self.connect()
        if not self.encoders:
            self._start_encoders(model, encoder, model_id)
        queue = [items[start : start + self.batch] for start in range(0, len(items), self.batch)]
        running: dict = {}
        free = list(self.encoders)
        try:
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
        finally:
            for ref in running:  # a task that ended meanwhile, or one Ray cannot cancel: its result is dropped
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref)

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
            "parts": self.parts,
        }

    def close(self) -> None:
        """Kill the actors and leave the cluster; a failure here is logged, never raised over the run's own."""
        if self._ray is None:
            return
        ray, self._ray, actors, self.encoders = self._ray, None, self.encoders, []
        try:
            for actor in actors:
                ray.kill(actor)
        except Exception as exc:  # a cluster gone meanwhile
            log.warning("ray: could not stop the embedding actors: %s", first_line(exc))
        finally:
            try:
                ray.shutdown()  # stops an instance started here; leaves a joined cluster running
            except Exception as exc:
                log.warning("ray: could not leave the cluster: %s", first_line(exc))
