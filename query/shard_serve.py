"""Shards on Ray Serve: each shard (query.shard) is a Serve application of one deployment, which Ray places on a
node of the cluster, restarts when its process dies and health-checks; the front (query.front) asks them through
Serve's deployment handles. The front itself is blobdex's own HTTP server (every surface, its tokens, its limits),
so Serve starts no HTTP proxy: a shard is reachable only through Ray.

Why Ray Serve: the indexer already runs on a Ray cluster (`blobdex index --cluster`), and Serve gives the parts a
shard service needs and blobdex would otherwise write itself — placement, restarts, health checks, replicas of one
shard behind one handle (`num_replicas`), and calls that carry numpy arrays and dataclasses without a wire format
of our own. A shard's errors cross as values, not exceptions, so the front says them in the shard's own words."""

from __future__ import annotations

import logging
import socket

from indexer.config import Config
from indexer.errors import BlobdexError
from indexer.ray_cluster import join
from indexer.store import store_for
from query.front import ShardDown
from query.replica import Replica
from query.threads import one_thread_numerics
from query.shard import ANSWERS, Shard, owned

log = logging.getLogger(__name__)

APP = "blobdex-shard-{index}-of-{count}"
SHARD_SECONDS = 30.0  # how long a shard may take to answer before the request fails


class ShardError(BlobdexError):
    """A shard refused a request, in its own words and with its status (a snapshot it cannot open, a mismatch)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class ShardReplica:
    """One replica of a shard, as Ray Serve runs it: a Shard, and `ask`, which calls one of its methods. With a
    store it follows the bucket as a read replica does (query.replica), into a data dir of its own on its node
    (<data_dir>/shards/<index>-of-<count>), downloading only its repos' chunk parts."""

    def __init__(self, cfg: Config, index: int, count: int, model_ids: tuple[str, ...], store: str | None, poll: float):
        data_dir = cfg.data_dir
        if store:
            data_dir = cfg.data_dir / "shards" / f"{index}-of-{count}"
            data_dir.mkdir(parents=True, exist_ok=True)
            name = f"{socket.gethostname()}:shard-{index}-of-{count}"
            keep = max(2, cfg.keep_snapshots)
            Replica(store_for(cfg, store), data_dir, poll, name, keep, owned(index, count)).start()
        one_thread_numerics()
        self.shard = Shard(data_dir, index, count, model_ids, cfg.exact_search)
        try:
            self.shard.reader()  # opened now, not by the first request; a failure is said by the requests
        except BlobdexError as exc:
            log.error("shard %d of %d: %s", index, count, exc)

    def ask(self, method: str, args: tuple):
        if method not in ANSWERS:
            return "error", f"a shard answers {', '.join(ANSWERS)}, not {method!r}", 400
        try:
            return "ok", getattr(self.shard, method)(*args)
        except BlobdexError as exc:
            return "error", exc.message, exc.status
        except Exception as exc:  # a bug: logged whole here, one sentence for the front
            log.exception("shard %d of %d failed on %s", self.shard.index, self.shard.count, method)
            name = type(exc).__name__
            return "error", f"shard {self.shard.index} of {self.shard.count} failed ({name}); its Ray log says why", 500


class RayShards:
    """The front's view of the shards on Ray Serve: each call asked of every shard named at once, then gathered."""

    def __init__(self, handles: list, apps: list[str]):
        self.handles, self.apps = handles, apps

    def __len__(self) -> int:
        return len(self.handles)

    def ask(self, method: str, calls: dict[int, tuple]) -> dict[int, object]:
        sent = {i: self.handles[i].ask.remote(method, args) for i, args in calls.items()}
        out = {}
        for i, response in sent.items():
            try:
                answer = response.result(timeout_s=SHARD_SECONDS)
            except Exception as exc:  # Ray's: the replica died, the application is gone, the call timed out
                raise ShardDown(  # Ray's own text names actors, pids and colours: its type says enough
                    f"shard {i} of {len(self)} ({self.apps[i]}) did not answer ({type(exc).__name__}): an answer "
                    f"without its repos would look whole and be wrong, so none is given; Ray Serve restarts a "
                    f"replica that died (ask again in a moment), and 'serve status' says what it runs"
                ) from exc
            if answer[0] == "error":
                raise ShardError(answer[1], answer[2])
            out[i] = answer[1]
        return out


def start(
    cfg: Config,
    count: int,
    model_ids: tuple[str, ...],
    cluster: str = "local",
    store: str | None = None,
    poll: float = 10.0,
) -> RayShards:
    """Run `count` shards of the config's snapshots on Ray Serve (joining the cluster at `cluster`, or starting Ray
    here for "local"), each following the data dir or, with `store`, the bucket; an application of that name already
    running is replaced."""
    from ray import serve

    join(cluster)
    serve.start(http_options={"location": "NoServer"})
    deployment = serve.deployment(ShardReplica, ray_actor_options={"num_cpus": 0}, health_check_period_s=10)
    apps, handles = [], []
    for index in range(count):
        name = APP.format(index=index, count=count)
        bound = deployment.options(name=name).bind(cfg, index, count, tuple(model_ids), store, poll)
        handles.append(serve.run(bound, name=name, route_prefix=None))
        apps.append(name)
        log.info("shard %d of %d: running as Ray Serve application %s", index, count, name)
    return RayShards(handles, apps)
