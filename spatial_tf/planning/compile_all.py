"""Compile every candidate of a plan, one row at a time: each row shown as its compile
ends, a time limit for the whole plan, and Ctrl-C keeping the rows already known.

``compile_all(jobs, run)`` returns ``{job: result or the exception}``; a job the time
limit or Ctrl-C left unfinished gets a ``NotCompiled`` (its ``reason`` says which), so the
plan still ranks what was compiled and names what was not.

>>> import time
>>> done = compile_all([1, 2, 3], lambda job, left: job * 10, progress=False)
>>> done
{1: 10, 2: 20, 3: 30}
>>> late = compile_all([1, 2], lambda job, left: time.sleep(0.2) or job, timeout=0.1,
...                    progress=False)
>>> late[1], str(late[2])
(1, 'not compiled: the time limit of 0.1 s ended first')
"""
import concurrent.futures
import sys
import time
from typing import Any, Callable, Dict, Optional, Sequence

from spatial_tf.error import Error

__all__ = ["compile_all", "compiles_text", "NotCompiled", "INTERRUPTED"]

INTERRUPTED = "stopped by Ctrl-C"


class NotCompiled(Error):
    """A candidate whose compile did not run or finish (``reason``: why not)."""

    def __init__(self, reason: str):
        super().__init__(f"not compiled: {reason}")
        self.reason = reason


def compile_all(jobs: Sequence[Any], run: Callable[[Any, Optional[float]], Any], *,
                workers: int = 1, progress: Optional[bool] = None, description: str = "",
                timeout: Optional[float] = None,
                row: Optional[Callable[[Any, Any], str]] = None) -> Dict[Any, Any]:
    """Call ``run(job, seconds_left)`` for each job (``workers`` at once, in threads).

    ``progress``: a bar and, with ``row(job, result)``, one line per finished job on
    stderr (default: when stderr is a terminal). ``timeout``: seconds for all jobs; a
    job not started or not finished by then gets ``NotCompiled``, as do the jobs left
    when Ctrl-C arrives (then the ``KeyboardInterrupt`` is raised again only if no job
    had finished).
    """
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    limit = NotCompiled(f"the time limit of {timeout:g} s ended first") if timeout else None
    show = sys.stderr.isatty() if progress is None else bool(progress)
    bar = _bar(len(jobs), description) if show else None
    results: Dict[Any, Any] = {}
    expired: list = []  # set once a compile ran into the time limit: start no more

    def guarded(job):
        left = None if deadline is None else deadline - time.monotonic()
        if expired or (left is not None and left <= 0):
            return limit
        try:
            return run(job, left)
        except TimeoutError:
            expired.append(job)
            return limit
        except Exception as e:  # recorded per candidate; plan raises if none compiles
            return e

    def finished(job, result):
        results[job] = result
        if show and row is not None:
            _write(bar, row(job, result))
        if bar is not None:
            bar.update()

    try:
        _each(jobs, guarded, finished, max(1, int(workers)))
    except KeyboardInterrupt:
        if not results:
            raise
        stopped = NotCompiled(INTERRUPTED)
        results.update({job: stopped for job in jobs if job not in results})
    finally:
        if bar is not None:
            bar.close()
    return results


def compiles_text(done) -> str:
    """How many compiles ``done`` holds (anything with ``cached``) and how many of them
    the compile cache answered: ``3 compiles``, ``1 compile, from cache``, ``2 compiles,
    1 from cache``."""
    from spatial_tf.table import plural

    n, cached = len(done), sum(bool(d.cached) for d in done)
    text = plural(n, "compile")
    if cached:
        text += ", from cache" if cached == n else f", {cached} from cache"
    return text


def _each(jobs, guarded, finished, workers):
    if workers == 1:
        for job in jobs:
            finished(job, guarded(job))
        return
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    try:
        futures = {pool.submit(guarded, job): job for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            finished(futures[future], future.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _bar(total, description):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=description, unit="compile", leave=False)


def _write(bar, line):
    if bar is not None:
        bar.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)
