# SPDX-License-Identifier: MIT
"""The offset of this rank's clock to rank 0's, measured through the process group's store.

Ranks on different hosts record times of different clocks: NTP keeps them within milliseconds at
best, and one rank's step that seems to start 5 ms late may only have a clock 5 ms ahead. So once
a process group is up (at session start if it already is, else when ``init_process_group``
returns) and again before it goes (``destroy_process_group``, or at stop), every rank measures its
offset to rank 0's clock by a few round trips through the group's store, and the manifest keeps it
(``"clock_sync"``) with its error; ``tw-report`` (``--trace``, ``--ranks``, ``--html``) adds it to
the rank's times.

A round trip (Cristian's algorithm): rank r reads its clock (t0), puts a ping in the store, and
waits for rank 0's answer, which holds rank 0's clock read between ping and answer (t); rank r reads
its clock again (t1). Rank 0's t was read at some instant between t0 and t1, so rank 0's clock
minus rank r's is t - (t0 + t1) / 2 within +-(t1 - t0) / 2, whatever the delays each way. Of a few
rounds the one with the least delay is kept. Rank 0 answers the ranks one after the other, each
after a "go" key, so that no rank's ping waits in the store while rank 0 serves another.

Nothing here may break the program: a failure (a store without ``get``, a timeout, a rank that
never comes) is written in the manifest as the reason, and profiling goes on.
"""
import json
import os
import sys
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional

ROUNDS = 5
TIMEOUT_S = 10.0  # per store wait: a rank that does not take part costs the others this, once
_PREFIX = "torchwrapper/clock"


def _measure(store: Any, rank: int, world: int, phase: str, now: Callable[[], int]) -> Dict[str, Any]:
    if rank == 0:
        for peer in range(1, world):
            for i in range(ROUNDS):
                key = f"{_PREFIX}/{phase}/{peer}/{i}"
                store.set(key + "/go", b"1")
                store.get(key + "/ping")
                store.set(key + "/pong", str(now()).encode())
        return {"offset_ns": 0, "error_ns": 0, "rounds": ROUNDS, "world_size": world}
    best: Optional[tuple] = None
    for i in range(ROUNDS):
        key = f"{_PREFIX}/{phase}/{rank}/{i}"
        store.get(key + "/go")
        t0 = now()
        store.set(key + "/ping", b"1")
        t = int(store.get(key + "/pong"))
        t1 = now()
        if best is None or t1 - t0 < best[1] - best[0]:
            best = (t0, t1, t)
        for suffix in ("/go", "/ping", "/pong"):   # keep the store small; a store without delete keeps them
            try:
                store.delete_key(key + suffix)
            except Exception:
                pass
    t0, t1, t = best
    return {"offset_ns": t - (t0 + t1) // 2, "error_ns": (t1 - t0 + 1) // 2, "rounds": ROUNDS, "world_size": world}


class ClockSync:
    """Measures at start (group up) or when the group comes up, and before it goes or at stop;
    writes each measurement into the session's manifest under ``clock_sync``."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.results: Dict[str, Any] = {}
        self._patched: List[tuple] = []
        self._phases = 0
        # A forked child (a DataLoader worker) keeps this object and a copy of the group: it is no
        # rank of its own, and must not answer or ask in the store.
        self._pid = os.getpid()

    def _dist(self) -> Any:
        dist = sys.modules.get("torch.distributed")
        if dist is None or not getattr(dist, "is_available", lambda: False)():
            return None
        return dist

    def _paused(self, work: Callable[[], None]) -> None:
        """Runs work with this thread's recording paused: the torch.distributed calls made here
        (is_initialized, the store's) are ours, not the program's, and must not be records."""
        if not self.session.active or os.getpid() != self._pid:
            return
        self.session.pause_thread()
        try:
            work()
        finally:
            self.session.resume_thread()

    def _run(self, phase: str) -> None:
        self._paused(lambda: self._measure(phase))

    def _measure(self, phase: str) -> None:
        dist = self._dist()
        if dist is None or not dist.is_initialized() or phase in self.results:
            return
        self._phases += 1
        name = f"{phase}{self._phases}"   # each measurement's keys are its own, in every rank alike
        try:
            from torch.distributed import distributed_c10d as c10d

            store = c10d._get_default_store()
            old = getattr(store, "timeout", None)
            store.set_timeout(timedelta(seconds=TIMEOUT_S))
            try:
                result = _measure(store, dist.get_rank(), dist.get_world_size(), name, self.session.clock_ns)
            finally:
                if old is not None:
                    store.set_timeout(old)
            result["at_ns"] = self.session.clock_ns()
        except Exception as e:  # the program goes on; the manifest says why there is no offset
            result = {"error": f"{type(e).__name__}: {e}"[:300]}
        self.results[phase] = result
        try:
            self.session.set_manifest_key("clock_sync", json.dumps(self.results))
        except Exception:
            pass

    def attach(self) -> None:
        """At session start: measure now if the group is up; else when init_process_group returns.
        And before destroy_process_group."""
        self._paused(self._attach)

    def _attach(self) -> None:
        dist = self._dist()
        if dist is None:
            if "torch" in sys.modules:
                try:
                    import torch.distributed as dist  # noqa: F811  (imported lazily by torch itself)
                except Exception:
                    return
                if not dist.is_available():
                    return
            else:
                return
        self._measure("start")
        from torch.distributed import distributed_c10d as c10d

        sync = self

        def wrap(owner: Any, name: str, before: bool) -> None:
            original = getattr(owner, name, None)
            if original is None:
                return

            def measured(*args: Any, **kwargs: Any) -> Any:
                if before:
                    sync._run("stop")
                    return original(*args, **kwargs)
                result = original(*args, **kwargs)
                sync._run("start")
                return result

            measured.__wrapped__ = original  # type: ignore[attr-defined]
            measured.__name__ = getattr(original, "__name__", name)
            measured.__qualname__ = getattr(original, "__qualname__", name)
            measured.__doc__ = getattr(original, "__doc__", None)
            setattr(owner, name, measured)
            self._patched.append((owner, name, original, measured))

        for owner in {id(dist): dist, id(c10d): c10d}.values():
            wrap(owner, "init_process_group", before=False)
            wrap(owner, "destroy_process_group", before=True)

    def detach(self) -> None:
        """At stop: the second measurement if the group is still up, and the originals back."""
        self._run("stop")
        for owner, name, original, measured in reversed(self._patched):
            if getattr(owner, name, None) is measured:   # unless someone replaced it since
                setattr(owner, name, original)
        self._patched.clear()
